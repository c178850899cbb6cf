// mwb-store-bench: how fast the store ingests a long run and answers the app's queries on it.
//   mwb-store-bench [--points N] [--buckets B] [--store FILE]    (default 1,000,000 step records)
//   mwb-store-bench --samples [--sample-runs R] [--sample-points P]  text samples: 64 prompts per point
// Prints ingest rate, then per query the median of several runs (the first, cold one, separately).
#include "mwb/ipc/message.h"
#include "mwb/store/store.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void time_query(const char* what, int repeats, const std::function<std::size_t()>& q) {
    auto t = Clock::now();
    const std::size_t n = q();
    const double first = ms_since(t);
    std::vector<double> ms;
    for (int i = 0; i < repeats; ++i) {
        t = Clock::now();
        q();
        ms.push_back(ms_since(t));
    }
    std::sort(ms.begin(), ms.end());
    std::printf("  %-48s %8.2f ms (first %.2f ms) -> %zu rows\n", what, ms[ms.size() / 2], first, n);
}

/// R runs that sampled 64 prompts at P points each (completions of ~200 bytes): ingest and the
/// queries of the Samples panel and of History's comparison.
int samples_bench(const std::string& file, int runs, int points) {
    mwb::store::Store store(file);
    std::vector<std::string> uids;
    const std::string completion(200, 'x');
    auto t = Clock::now();
    {
        mwb::store::Store::Transaction tx(store);
        for (int r = 0; r < runs; ++r) {
            uids.push_back("bench-samples-" + std::to_string(r));
            int64_t seq = 0;
            for (int p = 1; p <= points; ++p)
                for (int k = 0; k < 64; ++k) {
                    nlohmann::ordered_json m = {{"schema", "mwb.telemetry/1.1"},
                                                {"topic", "sample"},
                                                {"run_id", uids.back()},
                                                {"seq", seq++},
                                                {"time", 1e9 + p},
                                                {"iteration", p * 100},
                                                {"consumed_tokens", p * 1000000},
                                                {"prompt_index", k},
                                                {"prompt", "Prompt number " + std::to_string(k)},
                                                {"completion", completion},
                                                {"prompt_tokens", 4},
                                                {"completion_tokens", 32},
                                                {"finish_reason", "length"},
                                                {"greedy", true},
                                                {"temperature", 0},
                                                {"top_k", 0},
                                                {"top_p", 1.0},
                                                {"seed", 1234},
                                                {"time_s", 0.1}};
                    store.ingest(*mwb::ipc::parse_message(m.dump()));
                }
        }
        tx.commit();
    }
    const double s = ms_since(t) / 1000;
    const double n = static_cast<double>(runs) * points * 64;
    std::printf("ingest: %.0f samples in %.1f s (%.0f samples/s, parse included); file %.0f MB\n", n, s, n / s,
                static_cast<double>(std::filesystem::file_size(file)) / 1e6);
    std::printf("queries on %d runs x %d points x 64 prompts:\n", runs, points);
    time_query("samples of one run (all)", 9, [&] { return store.samples(uids[0]).size(); });
    mwb::store::SampleQuery one;
    one.iteration = points * 50;
    time_query("samples of one run at one iteration", 9, [&] { return store.samples(uids[0], one).size(); });
    time_query("sample_prompts of every run", 9, [&] { return store.sample_prompts(uids).size(); });
    time_query("prompt_samples of every run, newest", 9,
               [&] { return store.prompt_samples(uids, "Prompt number 7").size(); });
    time_query("prompt_samples of every run, at an iteration", 9,
               [&] { return store.prompt_samples(uids, "Prompt number 7", points * 50).size(); });
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"mwb-store-bench: ingest and query timings of the run history store", "mwb-store-bench"};
    int64_t points = 1000000;
    int buckets = 1000;
    std::string file = (std::filesystem::temp_directory_path() / "mwb-store-bench.sqlite").string();
    app.add_option("--points", points, "Step records of the run")->capture_default_str();
    app.add_option("--buckets", buckets, "Buckets per series query (about the plot's width in pixels)")
        ->capture_default_str();
    bool reuse = false;
    app.add_option("--store", file, "Store file (replaced)")->capture_default_str();
    app.add_flag("--reuse", reuse, "Query the store file as it is (made by an earlier run) instead of refilling it");
    bool samples = false;
    int sample_runs = 10, sample_points = 500;
    app.add_flag("--samples", samples, "Time text samples (ingest, the Samples panel's and History's queries) instead");
    app.add_option("--sample-runs", sample_runs, "Runs with samples")->capture_default_str();
    app.add_option("--sample-points", sample_points, "Sampling points per run (64 prompts each)")
        ->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    if (!reuse || samples)
        for (const char* ext : {"", "-wal", "-shm"}) std::filesystem::remove(file + ext);

    if (samples) return samples_bench(file, sample_runs, sample_points);
    mwb::store::Store store(file);
    const std::string run = "bench-run";
    std::mt19937 rng(1);
    std::normal_distribution<double> noise(0, 0.05);
    auto t = Clock::now();
    if (!reuse) {
        mwb::store::Store::Transaction tx(store);
        nlohmann::ordered_json start = {{"schema", "mwb.telemetry/1"},
                                        {"topic", "run.start"},
                                        {"run_id", run},
                                        {"seq", 0},
                                        {"time", 0.0},
                                        {"config", {{"log_interval", 1}, {"train_iters", points}}}};
        store.ingest(*mwb::ipc::parse_message(start.dump()));
        for (int64_t i = 1; i <= points; ++i) {
            // A step record as the trainer writes it (the mem object included).
            nlohmann::ordered_json m = {
                {"schema", "mwb.telemetry/1"},
                {"topic", "step"},
                {"run_id", run},
                {"seq", i},
                {"time", 1e9 + static_cast<double>(i)},
                {"iteration", i},
                {"consumed_samples", 512 * i},
                {"consumed_tokens", 1048576 * i},
                {"lm_loss", 2.0 + 8.0 / std::sqrt(static_cast<double>(i)) + noise(rng)},
                {"lr", 6e-4},
                {"grad_norm", 1.0 + noise(rng)},
                {"loss_scale", 1.0},
                {"skipped_iterations", 0},
                {"iterations_in_interval", 1},
                {"iteration_time_s", 0.51},
                {"tokens_per_sec", 2.05e6},
                {"tflops_per_device", 150.0},
                {"hardware_tflops_per_device", 190.0},
                {"mem_allocated_bytes", 40000000000},
                {"mem_peak_bytes", 60000000000},
                {"mem", {{"allocated", 40000000000}, {"peak", 60000000000}, {"reserved", 64000000000}}}};
            store.ingest(*mwb::ipc::parse_message(m.dump()));
        }
        tx.commit();
    }
    const double ingest_s = ms_since(t) / 1000;
    if (!reuse)
        std::printf("ingest: %lld step records in %.1f s (%.0f records/s, parse included); file %.0f MB\n",
                    static_cast<long long>(points), ingest_s, static_cast<double>(points) / ingest_s,
                    static_cast<double>(std::filesystem::file_size(file)) / 1e6);

    std::printf("queries on %lld points, %d buckets:\n", static_cast<long long>(points), buckets);
    mwb::store::SeriesQuery all{std::nullopt, std::nullopt, buckets};
    time_query("series lm_loss, whole run", 9, [&] { return store.series(run, "lm_loss", all).buckets.size(); });
    time_query("series grad_norm, whole run", 9, [&] { return store.series(run, "grad_norm", all).buckets.size(); });
    mwb::store::SeriesQuery tenth{points / 3, points / 3 + points / 10, buckets};
    time_query("series lm_loss, a tenth of the run", 9,
               [&] { return store.series(run, "lm_loss", tenth).buckets.size(); });
    mwb::store::SeriesQuery zoom{points / 2, points / 2 + 5000, buckets};
    time_query("series lm_loss, 5000 iterations", 9, [&] { return store.series(run, "lm_loss", zoom).buckets.size(); });
    time_query("series lm_loss x 4 runs (the same run 4 times)", 5,
               [&] { return store.series(std::vector<std::string>(4, run), "lm_loss", all).size(); });
    time_query("brute force (every point read), whole run", 3,
               [&] { return store.series_brute_force(run, "lm_loss", all).buckets.size(); });
    time_query("run list", 9, [&] { return store.runs().size(); });
    return 0;
}
