#pragma once
// The run directory and the telemetry record stream written into it:
//   run.json       resolved config, topology, build info (rewritten when a run resumes)
//   metrics.jsonl  one JSON object per message of topic step / eval / memory
//   events.jsonl   run.start, event, run.end messages
//   samples.jsonl  text samples generated during training (topic sample)
// Every message carries schema, run_id, seq (one increasing sequence per run directory, continued
// on resume) and time, exactly as published on the wire (docs/protocol.md). A resumed run first cuts a
// torn last line (a record the previous run could not finish writing) and says so in an event.
#include "backend/core/files.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace mwb {

/// What this version writes: 1.1 adds the `sample` topic (readers accept any mwb.telemetry/1.x).
inline constexpr const char* kTelemetrySchema = "mwb.telemetry/1.1";

class RunDir {
public:
    /// Opens (creating it if needed) the run directory `path`; an empty path makes a new one under
    /// user_data_dir()/runs named after the time and `name`.
    RunDir(const fs::path& path, std::string_view name);
    ~RunDir();
    RunDir(const RunDir&) = delete;
    RunDir& operator=(const RunDir&) = delete;

    const fs::path& path() const { return path_; }
    const std::string& run_id() const { return run_id_; }
    /// True when the directory already held telemetry (a resumed run appends to it).
    bool resumed() const { return next_seq_ > 0; }

    void write_run_json(const nlohmann::json& run);
    /// Stamps `fields` with schema/topic/run_id/seq/time, appends it to the file of its topic, hands
    /// it to the forwarder (the wire), and returns the complete message.
    nlohmann::json publish(std::string_view topic, nlohmann::json fields);
    /// Every published message is also passed to `forward` as (topic, serialized JSON), e.g. to the
    /// ZeroMQ publisher; it must not block.
    using Forwarder = std::function<void(std::string_view topic, const std::string& json)>;
    void set_forwarder(Forwarder forward) { forward_ = std::move(forward); }
    int64_t next_seq() const { return next_seq_; }

private:
    fs::path path_;
    std::string run_id_;
    int64_t next_seq_ = 0;
    std::FILE* files_[3] = {nullptr, nullptr, nullptr};  // kStreams order
    Forwarder forward_;
    std::mutex mutex_;  // the hung-rank watchdog publishes from its own thread
};

}  // namespace mwb
