// The cost of TelemetryServer::publish() to the training thread: N ~1 KB step messages published while a
// subscriber that never reads is connected (the worst case: its queue stays full), median over
// repetitions. The speed figure tests/ipc/test_pubsub.cpp used to assert; docs/performance.md has the
// numbers. Not run by ctest.
//   mwb-bench-publish [--messages N] [--reps R]
#include "mwb/ipc/follower.h"
#include "mwb/ipc/server.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

using namespace std::chrono_literals;

namespace {

std::string step_message(const std::string& run_id, int64_t seq, const std::string& padding) {
    nlohmann::ordered_json m = {{"schema", "mwb.telemetry/1"},
                                {"topic", "step"},
                                {"run_id", run_id},
                                {"seq", seq},
                                {"time", 1.7e9 + seq},
                                {"iteration", seq},
                                {"lm_loss", 5.0},
                                {"grad_norm", 1.5},
                                {"pad", padding}};
    return m.dump();
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"publish() cost with an idle subscriber"};
    int64_t messages = 20000;
    int reps = 5;
    app.add_option("--messages", messages, "messages per repetition")->check(CLI::PositiveNumber);
    app.add_option("--reps", reps, "repetitions (median reported)")->check(CLI::PositiveNumber);
    CLI11_PARSE(app, argc, argv);

    std::vector<double> us;
    for (int r = 0; r < reps; ++r) {
        mwb::ipc::ServerOptions o;
        o.run_id = "bench";
        o.control_endpoint = "";
        o.history_budget_bytes = std::size_t{1} << 30;
        mwb::ipc::TelemetryServer server(o);
        mwb::ipc::FollowerOptions fo;
        fo.endpoint = server.publish_endpoint();
        fo.receive_hwm = 1;
        mwb::ipc::Follower idle(fo);
        idle.next(100ms);  // connected, then never reads again
        std::vector<std::string> batch;
        batch.reserve(static_cast<std::size_t>(messages));
        for (int64_t s = 0; s < messages; ++s) batch.push_back(step_message("bench", s, std::string(800, 'p')));
        const auto t0 = std::chrono::steady_clock::now();
        for (const std::string& m : batch) server.publish("step", m);
        const double elapsed = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        us.push_back(elapsed / static_cast<double>(messages));
        server.flush(20s);
        std::printf("rep %d: %.2f us per publish(), %llu dropped by the queue\n", r + 1, us.back(),
                    static_cast<unsigned long long>(server.stats().dropped));
    }
    std::sort(us.begin(), us.end());
    std::printf("publish(): median %.2f us per ~1 KB message (%lld messages x %d reps, idle subscriber)\n",
                us[us.size() / 2], static_cast<long long>(messages), reps);
    return 0;
}
