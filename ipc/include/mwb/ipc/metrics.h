#pragma once
// The metric table: every number of the telemetry records that something stores, charts or compares,
// listed once (src/metrics.cpp) with its wire key, unit, label, store column, the app's series and
// how it is derived. The step record's JSON writer and reader (schema.h), the store's steps columns
// and ingest, the app's digest, history loader, charts and comparison labels, and the table in
// docs/protocol.md all iterate it: a metric added here reaches every one of them. Qt-free.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace mwb::ipc {

struct StepRecord;

/// The series the app draws built in (the Monitor's charts, History's overlays); every one is a
/// table entry (metric_of_series). Count: none.
enum class SeriesId : int {
    Loss,           ///< step lm_loss
    ValLoss,        ///< eval lm_loss
    Lr,             ///< learning rate
    GradNorm,       ///< global gradient norm before clipping
    LossScale,      ///< fp16 loss scale
    TokensPerSec,   ///< trained tokens per second
    Tflops,         ///< model TFLOP/s per device (MFU = this / device peak)
    Mfu,            ///< model FLOP/s utilisation (absent without a configured peak)
    IterationTime,  ///< seconds per iteration
    Compute,        ///< seconds per iteration computing (the rest once communication and bubble are taken out)
    Communication,  ///< seconds per iteration in collectives and sends (communication_s)
    Bubble,         ///< seconds per iteration waiting for another pipeline stage (pipeline_bubble_s)
    Tokens,         ///< consumed tokens after the iteration (the Monitor's "trained tokens" x-axis)
    Time,           ///< Unix seconds of the step record (the "wall time" x-axis)
    Count
};
inline constexpr int kSeriesCount = static_cast<int>(SeriesId::Count);

/// Where a metric's value is in the records.
enum class MetricSource : uint8_t {
    Step,         ///< a top-level field of the `step` record
    SlowestRank,  ///< a phase of the `step` record's ranks[].time; stored as the slowest rank's
    Eval,         ///< a field of the `eval` record
    Envelope,     ///< the envelope's `time`
    Derived,      ///< computed from other metrics (Derivation says how); not on the wire itself
};

/// How a derived value is computed; each formula is written once, below.
enum class Derivation : uint8_t {
    None,
    Mfu,           ///< tflops_per_device / peak_tflops_per_device (mfu())
    TokensPerSec,  ///< tokens per iteration / iteration_time_s (tokens_per_sec())
    Compute,       ///< work phases - communication - bubble, at least 0 (split_time())
};

/// What a pipeline-phase second counts as in the compute / communication / bubble split.
enum class PhaseRole : uint8_t { None, Work, Communication, Bubble };

/// A field of StepRecord that a table row reads and writes (the JSON type follows the member's:
/// an optional number is `null` when empty or not finite).
using StepField =
    std::variant<std::monostate, int64_t StepRecord::*, double StepRecord::*, std::optional<double> StepRecord::*>;

/// How the Monitor draws a built-in series: its chart's title ("": the row's label), the chart's
/// value axis ("": none), the line's name in the chart's legend ("": the title). Rows drawn in one
/// chart have the same title and axis (test_ipc_metrics).
struct ChartText {
    std::string_view title, axis, line;
};

struct Metric {
    std::string_view name;    ///< unique id: the store's series name, the comparison's metric ("val_loss")
    std::string_view key;     ///< the field in its record ("lm_loss" of `eval` for val_loss)
    std::string_view unit;    ///< "" for plain numbers
    std::string_view label;   ///< for people ("Training loss")
    std::string_view column;  ///< the store's column (steps, or evals for Eval rows); "" when none
    SeriesId series;          ///< the built-in series, Count when none
    MetricSource source;
    Derivation derivation;
    PhaseRole phase;       ///< SlowestRank rows: their part of the split
    int compare;           ///< its place in History's comparison list (1 first); 0: not offered
    std::string_view doc;  ///< one line for docs/protocol.md
    StepField field;       ///< Step rows: the StepRecord member
    ChartText chart{};     ///< rows with a series the Monitor charts
};

/// Every metric, in the table's order (the store's step columns in their order among them).
std::span<const Metric> metrics();
/// The rows History's comparison offers, in its order.
std::vector<const Metric*> compared_metrics();
/// The row named `name`, or nullptr.
const Metric* find_metric(std::string_view name);
/// The row drawn as `series` (every SeriesId but Count has one).
const Metric& metric_of_series(SeriesId series);

/// The title of the chart `m` is drawn in (its chart title, else its label).
std::string_view chart_title(const Metric& m);
/// The name of `m`'s line in its chart's legend (its chart line, else the chart's title).
std::string_view chart_line(const Metric& m);

/// The seven phases of ranks[].time (the SlowestRank rows), in order; PhaseTimes is indexed by it.
enum class Phase : uint8_t { Forward, Backward, GradientReduce, Optimizer, Data, Communication, PipelineBubble, Count };
inline constexpr std::size_t kPhaseCount = static_cast<std::size_t>(Phase::Count);
const Metric& phase_metric(Phase phase);

// ---- derivations (the only place each formula is written) ----

/// Model FLOP utilisation: achieved over peak TFLOP/s per device; nullopt without a peak (<= 0).
std::optional<double> mfu(double tflops_per_device, double peak_tflops_per_device);
/// Trained tokens per second of wall time.
double tokens_per_sec(double tokens_per_iteration, double iteration_time_s);

/// One rank's seconds per iteration split into what the Monitor stacks.
struct TimeSplit {
    double compute = 0, communication = 0, bubble = 0, total = 0;
};
/// `work` is the sum of the Work phases; communication and bubble are inside it (clamped at 0).
TimeSplit split_time(double work, double communication, double bubble);

/// docs/protocol.md's table of the metrics (markdown), generated from the table.
std::string metrics_reference_markdown();

}  // namespace mwb::ipc
