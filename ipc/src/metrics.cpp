#include "mwb/ipc/metrics.h"

#include "mwb/ipc/schema.h"

#include <algorithm>
#include <array>
#include <stdexcept>

namespace mwb::ipc {

namespace {

constexpr SeriesId kNone = SeriesId::Count;
using S = SeriesId;
using D = Derivation;
using P = PhaseRole;

/// A top-level field of the step record: name, unit, label, stored in the steps column of its name?,
/// series, compared?, doc, and for a charted series its ChartText. The JSON key and the StepRecord
/// member are the name.
#define MWB_STEP(NAME, UNIT, LABEL, STORED, SERIES, COMPARE, DOC, ...)                                              \
    Metric {                                                                                                        \
#NAME, #NAME, UNIT, LABEL, STORED ? #NAME : "", SERIES, MetricSource::Step, D::None, P::None, COMPARE, DOC, \
            &StepRecord::NAME, ChartText {                                                                          \
            __VA_ARGS__                                                                                             \
        }                                                                                                           \
    }
/// A phase of ranks[].time, stored as the slowest rank's.
#define MWB_PHASE(NAME, LABEL, SERIES, ROLE, DOC, ...)                                                             \
    Metric {                                                                                                       \
#NAME, #NAME, "s", LABEL, #NAME, SERIES, MetricSource::SlowestRank, D::None, ROLE, 0, DOC, {}, ChartText { \
            __VA_ARGS__                                                                                            \
        }                                                                                                          \
    }

// the Monitor's charts that draw several rows
constexpr std::string_view kLossChart = "Loss", kAxisLoss = "nats/token";
constexpr std::string_view kStepChart = "Step time", kAxisStep = "s/iteration";

// The order of the rows with a steps column is the order of those columns (store/src/schema.cpp's
// migrations add columns, never reorder them); the phases are in Phase order.
const auto kMetrics = std::to_array<Metric>({
    MWB_STEP(lm_loss, "", "Training loss", true, S::Loss, 1,
             "mean loss of the interval's iterations with a finite loss (`null`: none)", kLossChart, kAxisLoss,
             "train"),
    MWB_STEP(lr, "", "Learning rate", true, S::Lr, 3, "learning rate of the last iteration"),
    MWB_STEP(grad_norm, "", "Gradient norm", true, S::GradNorm, 4,
             "global gradient norm before clipping, last iteration (`null`: not finite)"),
    MWB_STEP(loss_scale, "", "Loss scale", true, S::LossScale, 5, "fp16 loss scale (1 otherwise)"),
    MWB_STEP(skipped_iterations, "", "Skipped iterations", true, kNone, 0,
             "iterations of the interval skipped for non-finite gradients"),
    MWB_STEP(iteration_time_s, "s", "Iteration time (s)", true, S::IterationTime, 8,
             "wall time per iteration, mean over the interval", "Iteration time", "s (wall, mean per record)", ""),
    Metric{"tokens_per_sec", "tokens_per_sec", "1/s", "Tokens/s", "tokens_per_sec", S::TokensPerSec, MetricSource::Step,
           D::TokensPerSec, P::None, 6, "trained tokens per second", &StepRecord::tokens_per_sec,
           ChartText{"", "trained tokens/s", ""}},
    MWB_STEP(tflops_per_device, "TFLOP/s", "TFLOP/s per device", true, S::Tflops, 7,
             "model FLOPs (docs/run-directory.md) per second per device", "", "model TFLOP/s", ""),
    MWB_STEP(hardware_tflops_per_device, "TFLOP/s", "Hardware TFLOP/s per device", true, kNone, 0,
             "hardware FLOPs (recomputation included) per second per device"),
    MWB_STEP(consumed_samples, "", "Consumed samples", true, kNone, 0, "samples trained so far"),
    MWB_STEP(consumed_tokens, "", "Trained tokens", true, S::Tokens, 0,
             "tokens trained so far (the charts' tokens axis)"),
    MWB_STEP(mem_allocated_bytes, "bytes", "Allocated memory, rank 0 (bytes)", true, kNone, 0,
             "bytes allocated on rank 0 at the end of the interval"),
    MWB_STEP(mem_peak_bytes, "bytes", "Peak memory, rank 0 (bytes)", true, kNone, 0, "rank 0's peak bytes"),
    MWB_STEP(mem_peak_bytes_max_rank, "bytes", "Peak memory, fullest rank (bytes)", true, kNone, 9,
             "the highest peak of any rank"),
    MWB_PHASE(forward_s, "Forward (s)", kNone, P::Work, "forward passes"),
    MWB_PHASE(backward_s, "Backward (s)", kNone, P::Work, "backward passes"),
    MWB_PHASE(gradient_reduce_s, "Gradient reduction (s)", kNone, P::Work,
              "data-parallel gradient reduction, tied-embedding reduction"),
    MWB_PHASE(optimizer_s, "Optimizer (s)", kNone, P::Work, "clipping and the optimizer step"),
    MWB_PHASE(data_s, "Data (s)", kNone, P::Work, "loading batches"),
    MWB_PHASE(communication_s, "Communication (s)", S::Communication, P::Communication,
              "collectives and sends inside the phases above, waiting excluded", kStepChart, kAxisStep,
              "communication"),
    MWB_PHASE(pipeline_bubble_s, "Pipeline bubble (s)", S::Bubble, P::Bubble,
              "waiting for another pipeline stage, inside the phases above", kStepChart, kAxisStep, "bubble"),
    // on the wire, not a steps column (the store keeps them in step_details)
    Metric{"mfu", "mfu", "", "MFU", "", S::Mfu, MetricSource::Step, D::Mfu, P::None, 0,
           "tflops_per_device / --peak-tflops-per-device (`null` without a peak; readers then derive it "
           "from tflops_per_device and their own peak)",
           &StepRecord::mfu},
    MWB_STEP(global_batch_size, "", "Global batch size", false, kNone, 0, "samples per iteration"),
    MWB_STEP(iterations_in_interval, "", "Iterations in interval", false, kNone, 0,
             "iterations the record averages over"),
    // not on the wire: derived, or taken from other records
    Metric{"compute_s",
           "",
           "s",
           "Compute (s)",
           "",
           S::Compute,
           MetricSource::Derived,
           D::Compute,
           P::None,
           0,
           "work phases - communication_s - pipeline_bubble_s (at least 0), the slowest rank's",
           {},
           ChartText{kStepChart, kAxisStep, "compute"}},
    Metric{"val_loss",
           "lm_loss",
           "",
           "Validation loss",
           "lm_loss",
           S::ValLoss,
           MetricSource::Eval,
           D::None,
           P::None,
           2,
           "the `eval` record's loss (the evals table's lm_loss)",
           {},
           ChartText{kLossChart, kAxisLoss, "validation"}},
    Metric{"time",
           "time",
           "s",
           "Wall time",
           "",
           S::Time,
           MetricSource::Envelope,
           D::None,
           P::None,
           0,
           "the step record's envelope time, Unix seconds (the charts' wall-time axis)",
           {}},
});

#undef MWB_STEP
#undef MWB_PHASE

}  // namespace

std::span<const Metric> metrics() {
    return kMetrics;
}

std::vector<const Metric*> compared_metrics() {
    std::vector<const Metric*> out;
    for (const Metric& m : kMetrics)
        if (m.compare > 0) out.push_back(&m);
    std::sort(out.begin(), out.end(), [](const Metric* a, const Metric* b) { return a->compare < b->compare; });
    return out;
}

const Metric* find_metric(std::string_view name) {
    const auto it = std::find_if(kMetrics.begin(), kMetrics.end(), [&](const Metric& m) { return m.name == name; });
    return it == kMetrics.end() ? nullptr : &*it;
}

const Metric& metric_of_series(SeriesId series) {
    for (const Metric& m : kMetrics)
        if (m.series == series) return m;
    throw std::logic_error("metric table: no row for series " + std::to_string(static_cast<int>(series)));
}

std::string_view chart_title(const Metric& m) {
    return m.chart.title.empty() ? m.label : m.chart.title;
}

std::string_view chart_line(const Metric& m) {
    return m.chart.line.empty() ? chart_title(m) : m.chart.line;
}

const Metric& phase_metric(Phase phase) {
    // the table's SlowestRank rows, in order, are the phases (test_ipc_metrics checks the count and names)
    static const std::array<const Metric*, kPhaseCount> rows = [] {
        std::array<const Metric*, kPhaseCount> r{};
        std::size_t p = 0;
        for (const Metric& m : kMetrics)
            if (m.source == MetricSource::SlowestRank && p < kPhaseCount) r[p++] = &m;
        if (p != kPhaseCount) throw std::logic_error("metric table: expected 7 phase rows");
        return r;
    }();
    return *rows[static_cast<std::size_t>(phase)];
}

std::optional<double> mfu(double tflops_per_device, double peak_tflops_per_device) {
    if (!(peak_tflops_per_device > 0)) return std::nullopt;
    return tflops_per_device / peak_tflops_per_device;
}

double tokens_per_sec(double tokens_per_iteration, double iteration_time_s) {
    return tokens_per_iteration / iteration_time_s;
}

TimeSplit split_time(double work, double communication, double bubble) {
    TimeSplit t;
    t.communication = std::max(0.0, communication);
    t.bubble = std::max(0.0, bubble);
    t.compute = std::max(0.0, work - t.communication - t.bubble);
    t.total = std::max(work, t.compute + t.communication + t.bubble);
    return t;
}

std::string metrics_reference_markdown() {
    static constexpr std::string_view kSource[] = {"`step`", "`step` `ranks[].time`, slowest rank", "`eval`",
                                                   "envelope", "derived"};
    std::string out =
        "| metric | record: field | unit | store column | chart | meaning |\n"
        "| --- | --- | --- | --- | --- | --- |\n";
    for (const Metric& m : kMetrics) {
        out += "| `" + std::string(m.name) + "` | " + std::string(kSource[static_cast<int>(m.source)]);
        if (!m.key.empty()) out += ": `" + std::string(m.key) + "`";
        out += " | " + std::string(m.unit.empty() ? "" : m.unit) + " | ";
        if (!m.column.empty())
            out += std::string(m.source == MetricSource::Eval ? "evals." : "steps.") + std::string(m.column);
        out += " | " + std::string(m.series == SeriesId::Count ? "" : m.label);
        out += " | " + std::string(m.doc) + " |\n";
    }
    return out;
}

}  // namespace mwb::ipc
