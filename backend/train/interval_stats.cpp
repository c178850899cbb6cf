#include "backend/train/interval_stats.h"

#include "backend/parallel/parallel_context.h"
#include "backend/telemetry/run_dir.h"
#include "backend/telemetry/tensorboard.h"

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

ipc::MemoryStats memory_record(const MemoryStats& m) {
    ipc::MemoryStats r;
    r.allocated = m.total_current;
    r.peak = m.total_peak;
    r.reserved = m.reserved;
    for (int c = 0; c < kMemCategories; ++c) r.by_category[static_cast<std::size_t>(c)] = {m.current[c], m.peak[c]};
    return r;
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

ipc::RankRecord IntervalLog::rank_record(int rank, const RankReport& r, double n) const {
    ipc::RankRecord rec;
    rec.rank = rank;
    rec.tp = rank % par_.tp_size();
    rec.dp = (rank / par_.tp_size()) % par_.dp_size();
    rec.pp = rank / (par_.tp_size() * par_.dp_size());
    double comm_s = 0, wait_s = 0;
    for (int g = 0; g < kNumGroups; ++g) {
        rec.comm.push_back({kGroups[g], static_cast<int64_t>(r.bytes[g] / n), r.comm_seconds[g] / n});
        comm_s += r.comm_seconds[g];
        wait_s += r.wait_seconds[g];
    }
    using ipc::Phase;
    rec.time[Phase::Forward] = r.forward_s / n;
    rec.time[Phase::Backward] = r.backward_s / n;
    rec.time[Phase::GradientReduce] = r.reduce_s / n;
    rec.time[Phase::Optimizer] = r.optimizer_s / n;
    rec.time[Phase::Data] = r.data_s / n;
    rec.time[Phase::Communication] = (comm_s - wait_s) / n;
    rec.time[Phase::PipelineBubble] = wait_s / n;
    return rec;
}

ipc::RankMemoryRecord IntervalLog::rank_memory_record(int rank, const RankReport& r) const {
    ipc::RankMemoryRecord rec;
    rec.rank = rank;
    rec.mem.allocated = static_cast<int64_t>(r.mem_total);
    rec.mem.peak = static_cast<int64_t>(r.mem_total_peak);
    rec.mem.reserved = static_cast<int64_t>(r.mem_reserved);
    for (int c = 0; c < kMemCategories; ++c)
        rec.mem.by_category[static_cast<std::size_t>(c)] = {static_cast<int64_t>(r.mem_current[c]),
                                                            static_cast<int64_t>(r.mem_peak[c])};
    if (r.device_total > 0) {  // GPU runs: the device's own view (other processes' memory included)
        rec.device_free = static_cast<int64_t>(r.device_free);
        rec.device_total = static_cast<int64_t>(r.device_total);
    }
    return rec;
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
        ipc::StepRecord rec;
        ipc::MemoryRecord memory;
        memory.iteration = p.iteration;
        for (int r = 0; r < par_.world_size(); ++r) {
            rec.ranks.push_back(rank_record(r, all[static_cast<std::size_t>(r)], n));
            memory.ranks.push_back(rank_memory_record(r, all[static_cast<std::size_t>(r)]));
            rec.mem_peak_bytes_max_rank = std::max(
                rec.mem_peak_bytes_max_rank, static_cast<int64_t>(all[static_cast<std::size_t>(r)].mem_total_peak));
        }
        const int64_t peak_max = rec.mem_peak_bytes_max_rank;
        rec.iteration = p.iteration;
        rec.consumed_samples = p.consumed_samples;
        rec.consumed_tokens = static_cast<int64_t>(p.consumed_samples * seq_);
        rec.lm_loss = loss;  // written as null when not finite
        rec.lr = p.last_lr;
        rec.grad_norm = p.last_grad_norm;
        rec.loss_scale = p.last_loss_scale;
        rec.global_batch_size = p.last_batch;
        rec.skipped_iterations = s.skipped;
        rec.iterations_in_interval = s.iterations;
        rec.iteration_time_s = iter_time;
        rec.tokens_per_sec = ipc::tokens_per_sec(tokens_per_iter, iter_time);
        rec.tflops_per_device = tflops;
        rec.hardware_tflops_per_device = flops_.hardware / iter_time / 1e12 / par_.world_size();
        rec.mfu = ipc::mfu(tflops, cfg_.telemetry.peak_tflops_per_device);
        rec.mem_allocated_bytes = mem.total_current;
        rec.mem_peak_bytes = mem.total_peak;
        rec.mem = memory_record(mem);
        publish(ipc::StepRecord::kTopic, rec);
        publish(ipc::MemoryRecord::kTopic, memory);
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
                p.iteration, cfg_.training.train_iters, loss, p.last_lr, p.last_grad_norm, rec.tokens_per_sec,
                iter_time, tflops * 1e3,
                cfg_.logging.log_throughput ? fmt::format(" | throughput per device {:.4f} TFLOP/s", tflops) : "",
                format_bytes(mem.total_current), format_bytes(peak_max),
                s.skipped ? fmt::format(" | skipped {}", s.skipped) : "", format_duration(eta));
        }
    }
    stats_.reset();
}

}  // namespace mwb
