#include "train/interval_stats.h"

#include "parallel/parallel_context.h"
#include "telemetry/run_dir.h"
#include "telemetry/tensorboard.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

namespace mwb {

namespace {

std::string format_duration(double s) {
    if (!std::isfinite(s) || s < 0) return "?";
    const auto total = static_cast<int64_t>(s + 0.5);
    if (total >= 3600) return fmt::format("{}h{:02d}m", total / 3600, (total / 60) % 60);
    if (total >= 60) return fmt::format("{}m{:02d}s", total / 60, total % 60);
    return fmt::format("{}s", total);
}

std::string format_bytes(int64_t b) {
    const double v = static_cast<double>(b);
    if (v >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", v / (1024.0 * 1024 * 1024));
    return fmt::format("{:.1f} MiB", v / (1024.0 * 1024));
}

/// Group types whose traffic is reported (the "world" and "model" groups only carry norms and control).
const char* const kGroups[] = {"tp", "sp", "pp", "dp", "embedding", "model"};
constexpr int kNumGroups = 6;

}  // namespace

/// What each rank reports to rank 0 every log interval (a fixed-size record for one gather).
struct IntervalLog::RankReport {
    double mem_current[kMemCategories], mem_peak[kMemCategories];
    double mem_total, mem_total_peak, mem_reserved;
    double device_free, device_total;  // cudaMemGetInfo of a GPU run; 0 on the CPU
    double bytes[kNumGroups], comm_seconds[kNumGroups], wait_seconds[kNumGroups];
    double forward_s, backward_s, reduce_s, optimizer_s, data_s;  // sums over the interval
};

void IntervalComm::add_delta(const std::map<std::string, CommStats>& before,
                             const std::map<std::string, CommStats>& after) {
    for (const auto& [g, s] : after) {
        CommStats d = s;
        const CommStats& b = before.at(g);
        d.bytes_sent -= b.bytes_sent;
        d.calls -= b.calls;
        d.seconds -= b.seconds;
        d.wait_seconds -= b.wait_seconds;
        by_group[g].add(d);
    }
}

nlohmann::json memory_json(const MemoryStats& m) {
    nlohmann::json by_category = nlohmann::json::object();
    for (int c = 0; c < kMemCategories; ++c)
        by_category[std::string(category_name(static_cast<MemCategory>(c)))] = {{"current", m.current[c]},
                                                                                {"peak", m.peak[c]}};
    return {
        {"allocated", m.total_current}, {"peak", m.total_peak}, {"reserved", m.reserved}, {"by_category", by_category}};
}

void tensorboard_scalar(TensorBoardWriter& tb, const std::string& tag, double value, const Progress& p) {
    tb.add_scalar(tag, value, p.iteration);
    tb.add_scalar(tag + " vs samples", value, p.consumed_samples);
}

IntervalLog::IntervalLog(const Config& cfg, ParallelContext& par, const Allocator& alloc, const FlopCounts& flops,
                         int64_t seq, RunDir* dir, bool print_progress)
    : cfg_(cfg), par_(par), alloc_(alloc), flops_(flops), seq_(seq), dir_(dir), print_progress_(print_progress) {
    if (leader() && !cfg_.logging.tensorboard_dir.empty())
        tensorboard_ = std::make_unique<TensorBoardWriter>(cfg_.logging.tensorboard_dir);
}

IntervalLog::~IntervalLog() = default;

bool IntervalLog::leader() const {
    return par_.world_rank() == 0;
}

void IntervalLog::publish(std::string_view topic, nlohmann::json fields) {
    if (dir_) dir_->publish(topic, std::move(fields));
}

void IntervalLog::tensorboard_step(double loss, const Progress& p) {
    if (!tensorboard_ || p.iteration % cfg_.logging.tensorboard_log_interval != 0) return;
    tensorboard_scalar(*tensorboard_, "learning-rate", p.last_lr, p);
    tensorboard_scalar(*tensorboard_, "batch-size", static_cast<double>(p.last_batch), p);
    if (std::isfinite(loss)) tensorboard_scalar(*tensorboard_, "lm loss", loss, p);
    if (cfg_.logging.log_loss_scale_to_tensorboard)
        tensorboard_scalar(*tensorboard_, "loss-scale", p.last_loss_scale, p);
    if (std::isfinite(p.last_grad_norm)) tensorboard_scalar(*tensorboard_, "grad-norm", p.last_grad_norm, p);
}

IntervalLog::RankReport IntervalLog::report() const {
    RankReport r{};
    const MemoryStats m = alloc_.stats();
    for (int c = 0; c < kMemCategories; ++c) {
        r.mem_current[c] = static_cast<double>(m.current[c]);
        r.mem_peak[c] = static_cast<double>(m.peak[c]);
    }
    r.mem_total = static_cast<double>(m.total_current);
    r.mem_total_peak = static_cast<double>(m.total_peak);
    r.mem_reserved = static_cast<double>(m.reserved);
    const DeviceMemoryTotals totals = alloc_.device_totals();
    r.device_free = static_cast<double>(totals.free_bytes);
    r.device_total = static_cast<double>(totals.total_bytes);
    for (int g = 0; g < kNumGroups; ++g) {
        const auto it = stats_.comm.by_group.find(kGroups[g]);
        if (it == stats_.comm.by_group.end()) continue;
        r.bytes[g] = static_cast<double>(it->second.bytes_sent);
        r.comm_seconds[g] = it->second.seconds;
        r.wait_seconds[g] = it->second.wait_seconds;
    }
    r.forward_s = stats_.forward_s;
    r.backward_s = stats_.backward_s;
    r.reduce_s = stats_.reduce_s;
    r.optimizer_s = stats_.optimizer_s;
    r.data_s = stats_.data_s;
    return r;
}

nlohmann::json IntervalLog::rank_json(int rank, const RankReport& r, double n) const {
    const int tp = rank % par_.tp_size(), dp = (rank / par_.tp_size()) % par_.dp_size(),
              pp = rank / (par_.tp_size() * par_.dp_size());
    nlohmann::json comm = nlohmann::json::object();
    double comm_s = 0, wait_s = 0;
    for (int g = 0; g < kNumGroups; ++g) {
        comm[kGroups[g]] = {{"bytes_per_iteration", static_cast<int64_t>(r.bytes[g] / n)},
                            {"seconds_per_iteration", r.comm_seconds[g] / n}};
        comm_s += r.comm_seconds[g];
        wait_s += r.wait_seconds[g];
    }
    return {{"rank", rank},
            {"tp", tp},
            {"pp", pp},
            {"dp", dp},
            {"comm", comm},
            {"time",
             {{"forward_s", r.forward_s / n},
              {"backward_s", r.backward_s / n},
              {"gradient_reduce_s", r.reduce_s / n},
              {"optimizer_s", r.optimizer_s / n},
              {"data_s", r.data_s / n},
              {"communication_s", (comm_s - wait_s) / n},
              {"pipeline_bubble_s", wait_s / n}}}};
}

nlohmann::json IntervalLog::rank_memory_json(int rank, const RankReport& r) const {
    nlohmann::json by_category = nlohmann::json::object();
    for (int c = 0; c < kMemCategories; ++c)
        by_category[std::string(category_name(static_cast<MemCategory>(c)))] = {
            {"current", static_cast<int64_t>(r.mem_current[c])}, {"peak", static_cast<int64_t>(r.mem_peak[c])}};
    nlohmann::json j = {{"rank", rank},
                        {"allocated", static_cast<int64_t>(r.mem_total)},
                        {"peak", static_cast<int64_t>(r.mem_total_peak)},
                        {"reserved", static_cast<int64_t>(r.mem_reserved)},
                        {"by_category", by_category}};
    if (r.device_total > 0) {  // GPU runs: the device's own view (other processes' memory included)
        j["device_free"] = static_cast<int64_t>(r.device_free);
        j["device_total"] = static_cast<int64_t>(r.device_total);
    }
    return j;
}

void IntervalLog::log_interval(const Progress& p) {
    const RankReport mine = report();
    std::vector<RankReport> all(static_cast<std::size_t>(par_.world_size()));
    par_.world().gather(&mine, all.data(), sizeof(RankReport), 0);
    const IntervalStats& s = stats_;
    const double n = static_cast<double>(std::max<int64_t>(1, s.iterations));
    if (leader()) {
        const double iter_time = s.time / n;
        const double tokens_per_iter = static_cast<double>(s.samples) / n * seq_;
        const double loss = s.loss_count ? s.loss / static_cast<double>(s.loss_count) : NAN;
        const MemoryStats mem = alloc_.stats();
        const double tflops = flops_.model / iter_time / 1e12 / par_.world_size();
        nlohmann::json ranks = nlohmann::json::array(), memory = nlohmann::json::array();
        int64_t peak_max = 0;
        for (int r = 0; r < par_.world_size(); ++r) {
            ranks.push_back(rank_json(r, all[static_cast<std::size_t>(r)], n));
            memory.push_back(rank_memory_json(r, all[static_cast<std::size_t>(r)]));
            peak_max = std::max(peak_max, static_cast<int64_t>(all[static_cast<std::size_t>(r)].mem_total_peak));
        }
        nlohmann::json rec = {
            {"iteration", p.iteration},
            {"consumed_samples", p.consumed_samples},
            {"consumed_tokens", static_cast<int64_t>(p.consumed_samples * seq_)},
            {"lm_loss", std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr)},
            {"lr", p.last_lr},
            {"grad_norm", std::isfinite(p.last_grad_norm) ? nlohmann::json(p.last_grad_norm) : nlohmann::json(nullptr)},
            {"loss_scale", p.last_loss_scale},
            {"global_batch_size", p.last_batch},
            {"skipped_iterations", s.skipped},
            {"iterations_in_interval", s.iterations},
            {"iteration_time_s", iter_time},
            {"tokens_per_sec", tokens_per_iter / iter_time},
            {"tflops_per_device", tflops},
            {"hardware_tflops_per_device", flops_.hardware / iter_time / 1e12 / par_.world_size()},
            {"mfu", cfg_.telemetry.peak_tflops_per_device > 0
                        ? nlohmann::json(tflops / cfg_.telemetry.peak_tflops_per_device)
                        : nlohmann::json(nullptr)},
            {"mem_allocated_bytes", mem.total_current},
            {"mem_peak_bytes", mem.total_peak},
            {"mem_peak_bytes_max_rank", peak_max},
            {"mem", memory_json(mem)},
            {"ranks", ranks},
        };
        publish("step", rec);
        publish("memory", {{"iteration", p.iteration}, {"ranks", memory}});
        if (tensorboard_) {
            if (cfg_.logging.log_timers_to_tensorboard) {
                tensorboard_->add_scalar("iteration-time", iter_time, p.iteration);
                if (cfg_.logging.log_throughput) tensorboard_->add_scalar("throughput", tflops, p.iteration);
            }
            if (cfg_.logging.log_memory_to_tensorboard) {
                tensorboard_->add_scalar("mem-allocated-bytes", static_cast<double>(mem.total_current), p.iteration);
                tensorboard_->add_scalar("mem-max-allocated-bytes", static_cast<double>(mem.total_peak), p.iteration);
                tensorboard_->add_scalar("mem-reserved-bytes", static_cast<double>(mem.reserved), p.iteration);
            }
            tensorboard_->flush();
        }
        if (print_progress_) {
            const double eta = iter_time * static_cast<double>(cfg_.training.train_iters - p.iteration);
            spdlog::info(
                "iter {:>6}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | {:.3f} s/it | "
                "{:.1f} GFLOP/s{} | mem {} (peak {}){} | ETA {}",
                p.iteration, cfg_.training.train_iters, loss, p.last_lr, p.last_grad_norm, tokens_per_iter / iter_time,
                iter_time, tflops * 1e3,
                cfg_.logging.log_throughput ? fmt::format(" | throughput per device {:.4f} TFLOP/s", tflops) : "",
                format_bytes(mem.total_current), format_bytes(peak_max),
                s.skipped ? fmt::format(" | skipped {}", s.skipped) : "", format_duration(eta));
        }
    }
    stats_.reset();
}

}  // namespace mwb
