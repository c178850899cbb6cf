#pragma once
// What the store's queries return: plain structs for the app's models and for mwb-record.
#include "mwb/ipc/schema.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mwb::store {

struct RunSummary {
    std::string uid;  ///< run_id on the wire
    std::string name;
    std::optional<double> created;   ///< Unix seconds of the first run.start
    std::optional<double> finished;  ///< of the last run.end
    std::string status;              ///< running | finished | interrupted | stopped | failed | unknown
    std::string reason;
    int64_t iteration = 0;  ///< last iteration seen
    std::optional<int64_t> train_iters;
    std::optional<double> last_loss;  ///< lm_loss of the last step record
    std::vector<std::string> tags;
    std::string notes;
    int64_t next_seq = 0;  ///< every message below this seq is stored
};

struct RunRecord : RunSummary {
    nlohmann::json config, topology, hosts, derived;  ///< null when unknown
};

struct RunFilter {
    std::string text;                   ///< substring of uid, name or notes ("" = any)
    std::vector<std::string> statuses;  ///< any of these ("" = any)
    std::string tag;                    ///< runs carrying this tag ("" = any)
    std::optional<double> created_after, created_before;
    int limit = 1000;
    int offset = 0;
};

/// One bucket of a downsampled series: the values of the points whose iteration falls into it.
/// When a series is small enough to return whole, every point is its own bucket (n = 1).
struct Bucket {
    int64_t x_min = 0, x_max = 0;  ///< first and last iteration among its points
    int64_t n = 0;                 ///< points (non-NULL values)
    double y_min = 0, y_max = 0, y_mean = 0;
};

struct SeriesQuery {
    std::optional<int64_t> x_from, x_to;  ///< iteration range, inclusive (default: the whole run)
    int buckets = 1000;                   ///< about one per pixel column
};

struct Series {
    std::string run;  ///< uid
    std::string metric;
    std::vector<Bucket> buckets;  ///< in iteration order, empty buckets left out
    int64_t points = 0;           ///< points in the range
    bool raw = false;             ///< every point returned as it is
};

/// Where a run was in wall-clock time at an iteration: seconds since the run's first run.start
/// (or since its first timed step when no run.start was stored).
struct WallClockPoint {
    int64_t iteration = 0;
    double seconds = 0;
};

/// A stored evaluation: the `eval` record's body as it arrived (every field of ipc::eval_fields() the
/// store has a column for, and those it kept in `extra`), so a new eval field reaches its readers
/// without a change here.
struct EvalPoint {
    int64_t seq = 0, iteration = 0;
    std::optional<double> time;
    nlohmann::json body = nlohmann::json::object();
};

struct EventRecord {
    int64_t seq = 0;
    std::optional<double> time;
    std::string topic, kind;
    std::optional<int64_t> iteration;
    nlohmann::json body;
};

struct MemorySample {
    int64_t seq = 0, rank = 0;
    std::optional<int64_t> iteration, allocated, peak, reserved;
    std::optional<double> time;
    nlohmann::json by_category;
};

/// One stored `sample` record (docs/protocol.md, mwb.telemetry/1.1): what the model wrote for one
/// prompt at one iteration during training, with the settings it was sampled with (ipc's record: a
/// sample field is added there), and which message of which run it was.
struct SampleRecord : ipc::SampleMessage {
    std::string run;             ///< uid
    int64_t seq = -1;            ///< the message's
    std::optional<double> time;  ///< Unix seconds (the envelope's)
};

/// Which samples of a run: all, one iteration's, one prompt's, the newest `limit` iterations.
struct SampleQuery {
    std::optional<int64_t> iteration;     ///< only this iteration
    std::optional<int64_t> prompt_index;  ///< only this prompt
    int limit = 100000;                   ///< at most this many records (newest first)
};

/// One configuration key whose value differs between runs; values[i] belongs to the i-th run
/// (null where a run lacks the key).
struct ConfigDifference {
    std::string key;
    std::vector<nlohmann::json> values;
};

}  // namespace mwb::store
