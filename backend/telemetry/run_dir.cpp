#include "backend/telemetry/run_dir.h"

#include "mwb/kernels/error.h"

#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>

namespace mwb {

namespace {

double unix_time() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string timestamp_name() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
    return buf;
}

/// Highest seq and the run_id found in an existing jsonl file (-1 / "" when none).
void scan_existing(const fs::path& file, int64_t& max_seq, std::string& run_id) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) continue;  // not a record (torn tails are cut first)
        if (j.contains("seq") && j["seq"].is_number_integer()) max_seq = std::max(max_seq, j["seq"].get<int64_t>());
        if (run_id.empty() && j.contains("run_id") && j["run_id"].is_string()) run_id = j["run_id"].get<std::string>();
    }
}

/// A record cut short (disk full, a crash inside a write) is a last line without its newline; appending
/// after it would glue the next record onto it and lose both. Cuts the file back to its last complete
/// line and returns the bytes dropped.
int64_t drop_torn_tail(const fs::path& file) {
    std::error_code ec;
    const auto size = static_cast<int64_t>(fs::file_size(file, ec));
    if (ec || size == 0) return 0;
    std::ifstream in(file, std::ios::binary);
    int64_t keep = size;
    const int64_t chunk = 1 << 16;
    // Scan backwards for the last newline.
    while (keep > 0) {
        const int64_t from = std::max<int64_t>(0, keep - chunk);
        std::string buf(static_cast<std::size_t>(keep - from), '\0');
        in.seekg(from);
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        MWB_CHECK(in.good(), "cannot read '{}'", file.string());
        if (keep == size && buf.back() == '\n') return 0;
        const auto nl = buf.rfind('\n');
        if (nl != std::string::npos) {
            keep = from + static_cast<int64_t>(nl) + 1;
            break;
        }
        keep = from;
    }
    fs::resize_file(file, static_cast<uintmax_t>(keep), ec);
    MWB_CHECK(!ec, "cannot repair the torn last line of '{}': {}", file.string(), ec.message());
    return size - keep;
}

/// The files of the stream, in the order ipc::RunDirLog numbers them; a topic's file is stream_of(topic).
constexpr const char* kStreams[3] = {"metrics.jsonl", "events.jsonl", "samples.jsonl"};
int stream_of(std::string_view topic) {
    if (topic == "step" || topic == "eval" || topic == "memory") return 0;
    return topic == "sample" ? 2 : 1;
}

std::FILE* open_append(const fs::path& p) {
    std::FILE* f = std::fopen(p.c_str(), "a");
    MWB_CHECK(f != nullptr, "cannot open '{}' for appending: {}", p.string(), std::strerror(errno));
    return f;
}

}  // namespace

RunDir::RunDir(const fs::path& path, std::string_view name) {
    const std::string folder = name.empty() ? timestamp_name() : fmt::format("{}-{}", timestamp_name(), name);
    path_ = path.empty() ? user_data_dir() / "runs" / folder : path;
    std::error_code ec;
    fs::create_directories(path_, ec);
    MWB_CHECK(!ec, "run_dir: cannot create '{}': {}", path_.string(), ec.message());
    int64_t max_seq = -1, torn[3] = {0, 0, 0};
    for (int i = 0; i < 3; ++i) {
        torn[i] = drop_torn_tail(path_ / kStreams[i]);
        scan_existing(path_ / kStreams[i], max_seq, run_id_);
    }
    next_seq_ = max_seq + 1;
    if (run_id_.empty()) {
        std::random_device rd;
        run_id_ = fmt::format("{}-{:08x}", path_.filename().string(), rd());
    }
    // samples.jsonl only when a sample is published (runs without samples keep two files)
    for (int i = 0; i < 2; ++i) files_[i] = open_append(path_ / kStreams[i]);
    for (int i = 0; i < 3; ++i)
        if (torn[i] > 0) publish("event", {{"kind", "torn_record_dropped"}, {"file", kStreams[i]}, {"bytes", torn[i]}});
}

RunDir::~RunDir() {
    for (std::FILE* f : files_)
        if (f) std::fclose(f);
}

void RunDir::write_run_json(const nlohmann::json& run) { write_file_atomic(path_ / "run.json", run.dump(2) + "\n"); }

nlohmann::json RunDir::publish(std::string_view topic, nlohmann::json fields) {
    // Envelope first, then the topic's fields in their own order (readable files; receivers must not
    // depend on key order).
    const std::lock_guard<std::mutex> lock(mutex_);
    nlohmann::ordered_json msg = {{"schema", kTelemetrySchema}, {"topic", topic}, {"run_id", run_id_},
                                  {"seq", next_seq_++},         {"time", unix_time()}};
    for (auto& [key, value] : fields.items()) msg[key] = value;
    const int stream = stream_of(topic);
    if (!files_[stream]) files_[stream] = open_append(path_ / kStreams[stream]);
    std::FILE* f = files_[stream];
    std::string line = msg.dump();
    if (forward_) forward_(topic, line);
    line += "\n";
    MWB_CHECK(std::fwrite(line.data(), 1, line.size(), f) == line.size() && std::fflush(f) == 0,
              "cannot append to '{}': {}", (path_ / kStreams[stream]).string(), std::strerror(errno));
    return nlohmann::json(msg);
}

}  // namespace mwb
