#include "backend/train/step_graph.h"

#include "backend/core/host_staging.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/error.h"

namespace mwb {

StepGraph::StepGraph(OpContext& ctx, Allocator& alloc, bool enabled, int64_t warmup_steps, int64_t micro_batches,
                     int64_t input_elements)
    : ctx_(ctx), alloc_(alloc), enabled_(enabled && ctx.device == Device::CUDA), warmup_(warmup_steps),
      micro_batches_(micro_batches), input_elements_(input_elements) {
    if (!enabled_) return;
    MWB_CHECK(warmup_ >= 1, "cuda graph: {} warm-up steps (at least 1)", warmup_);
    inputs_ = Buffer(alloc_, MemCategory::Data, micro_batches_ * input_elements_, DType::I32);
    staging_ = std::make_unique<HostStaging>();
}

StepGraph::~StepGraph() {
    if (!graph_) return;
    try {
        device::synchronize(ctx_.stream);  // a replay may still run
        device::destroy_graph(graph_);
        alloc_.release_pool();
    } catch (const Error&) {
        // The GPU context may be gone at exit: the driver reclaims everything.
    }
}

TensorView StepGraph::inputs(int64_t m) const {
    MWB_CHECK(enabled_ && m >= 0 && m < micro_batches_, "cuda graph: no inputs for micro-batch {} of {}", m,
              micro_batches_);
    return slice_1d(inputs_.view(), m * input_elements_, input_elements_);
}

int32_t* StepGraph::host_inputs() {
    return static_cast<int32_t*>(staging_->next(inputs_.bytes()));
}

void StepGraph::upload_inputs() {
    staging_->upload(inputs_.data(), 0, inputs_.bytes(), ctx_.stream);
    staging_->uploaded(ctx_.stream);
}

void StepGraph::run(const std::function<void()>& queue) {
    // The step counts once its work is queued: inside `queue`, graphed() still says what this step is.
    if (!graphed()) {
        queue();
    } else if (!graph_) {
        capture(queue);
        device::launch_graph(graph_, ctx_.stream);  // a capture only records: this step runs now
    } else {
        ++replays_;
        alloc_.raise_peaks(captured_);
        device::launch_graph(graph_, ctx_.stream);
    }
    ++steps_;
}

void StepGraph::capture(const std::function<void()>& queue) {
    // The capture's peaks alone (a replay reports them); the run's peaks are restored after.
    const MemoryStats before = alloc_.stats();
    alloc_.reset_peaks();
    alloc_.begin_capture();
    device::begin_capture(ctx_.stream);
    try {
        queue();
        graph_ = device::end_capture(ctx_.stream);
    } catch (...) {
        device::abort_capture(ctx_.stream);
        alloc_.end_capture();
        alloc_.release_pool();
        alloc_.raise_peaks(before);
        throw;
    }
    alloc_.end_capture();
    captured_ = alloc_.stats();
    alloc_.raise_peaks(before);
}

}  // namespace mwb
