#pragma once
// Telemetry messages and run directories as RunDir writes them, for the ipc/ and store/ suites.
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace mwb::test {

/// One message with the envelope first (as RunDir::publish writes it) and `fields` after.
inline std::string wire_message(const std::string& run_id, int64_t seq, const std::string& topic,
                                const nlohmann::json& fields = nlohmann::json::object(), double time = 0) {
    nlohmann::ordered_json m = {{"schema", "mwb.telemetry/1"},
                                {"topic", topic},
                                {"run_id", run_id},
                                {"seq", seq},
                                {"time", time > 0 ? time : 1.7e9 + static_cast<double>(seq)}};
    for (const auto& [k, v] : fields.items()) m[k] = v;
    return m.dump();
}

/// The topic of message `seq` in a synthetic run: run.start, then steps with an eval or event now and then.
inline std::string synthetic_topic(int64_t seq) {
    if (seq == 0) return "run.start";
    if (seq % 10 == 5) return "eval";
    if (seq % 10 == 9) return "event";
    return "step";
}

inline std::string synthetic_message(const std::string& run_id, int64_t seq) {
    const std::string topic = synthetic_topic(seq);
    nlohmann::json f = {{"iteration", seq}};
    if (topic == "step")
        f.update({{"lm_loss", 5.0 - 0.001 * static_cast<double>(seq)}, {"lr", 1e-3}, {"grad_norm", 1.5}});
    if (topic == "eval") f.update({{"lm_loss", 4.0}, {"ppl", 54.6}});
    if (topic == "event") f.update({{"kind", "checkpoint_saved"}, {"path", "/x"}});
    if (topic == "run.start") f = {{"config", {{"log_interval", 1}, {"train_iters", 1000}}}, {"iteration", 0}};
    return wire_message(run_id, seq, topic, f);
}

/// Appends a message to the run directory's file for its topic (metrics.jsonl or events.jsonl).
inline void append_to_run_dir(const std::filesystem::path& dir, const std::string& topic, const std::string& json) {
    const bool metric = topic == "step" || topic == "eval" || topic == "memory";
    std::ofstream(dir / (metric ? "metrics.jsonl" : "events.jsonl"), std::ios::app) << json << "\n";
}

/// Polls `done` every 5 ms until it holds or `timeout` passes; returns its last value.
template <typename F>
bool wait_until(F&& done, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) return done();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
}

/// The fields of a `sample` record as the trainer publishes them (SAMPLES_CONTRACT.md), greedy
/// unless `sampled`; a test overrides what it needs.
inline nlohmann::json sample_fields(int64_t iteration, int64_t prompt_index, const std::string& prompt,
                                    const std::string& completion, bool sampled = false) {
    return {{"iteration", iteration},
            {"consumed_tokens", iteration * 2048},
            {"prompt_index", prompt_index},
            {"prompt", prompt},
            {"completion", completion},
            {"prompt_tokens", 3},
            {"completion_tokens", 7},
            {"finish_reason", "length"},
            {"greedy", !sampled},
            {"temperature", sampled ? 0.8 : 0.0},
            {"top_k", sampled ? 40 : 0},
            {"top_p", sampled ? 0.95 : 1.0},
            {"seed", 1234},
            {"time_s", 0.05}};
}

/// One message with the schema of a run that publishes samples (mwb.telemetry/1.1).
inline std::string wire_message_1_1(const std::string& run_id, int64_t seq, const std::string& topic,
                                    const nlohmann::json& fields = nlohmann::json::object(), double time = 0) {
    auto m = nlohmann::ordered_json::parse(wire_message(run_id, seq, topic, fields, time));
    m["schema"] = "mwb.telemetry/1.1";
    return m.dump();
}

}  // namespace mwb::test
