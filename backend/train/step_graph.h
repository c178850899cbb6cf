#pragma once
// The training step as one CUDA graph (runtime.enable_cuda_graph; docs/gpu.md, "CUDA graph of the
// training step"). The first cuda_graph_warmup_steps steps run eagerly (the caching allocator, the
// scratch slots and the cuBLASLt/cuDNN plans reach their sizes); the next one is captured on the op
// stream — the forward and backward passes of every micro-batch, the gradient reduction and the
// optimizer, with every block the allocator hands out or takes back meanwhile owned by the graph's
// pool (Allocator::begin_capture) — instantiated and launched; every later step replays it. What
// changes from step to step reaches the graph through memory it reads: the step block
// (Optimizer::begin_step: learning rate, loss scale, iteration for the dropout streams, the loss
// gradient's scale) and the micro-batches' ids and targets (inputs(): written before each launch).
// The end-of-step read stays outside; evaluation, checkpoints and samples run eagerly between replays.
// On the CPU, or without the flag, every step runs eagerly: run() just calls its function.
#include "backend/core/memory.h"
#include "mwb/kernels/ops.h"

#include <functional>
#include <memory>

namespace mwb {

class HostStaging;

class StepGraph {
public:
    /// `enabled`: the run captures (a CUDA context and runtime.enable_cuda_graph); `warmup_steps`
    /// eager steps first. `input_elements`: I32 elements of one micro-batch's inputs (ids and targets).
    StepGraph(OpContext& ctx, Allocator& alloc, bool enabled, int64_t warmup_steps, int64_t micro_batches,
              int64_t input_elements);
    ~StepGraph();
    StepGraph(const StepGraph&) = delete;
    StepGraph& operator=(const StepGraph&) = delete;

    bool enabled() const { return enabled_; }
    /// Whether the next run() captures or replays (its micro-batches' inputs must be in inputs() then).
    bool graphed() const { return enabled_ && steps_ >= warmup_; }
    /// Steps run so far (eager and graphed), and replays of the graph among them.
    int64_t steps() const { return steps_; }
    int64_t replays() const { return replays_; }

    /// Micro-batch m's inputs (I32, ids then targets) in the fixed device buffer a graphed step reads.
    TensorView inputs(int64_t m) const;
    /// The host buffer to lay all micro-batches' inputs out in (micro-batch m at m · input_elements),
    /// then upload_inputs() queues its copy into inputs() on the op stream, before the launch.
    int32_t* host_inputs();
    void upload_inputs();

    /// One step's queued work `queue`: run eagerly (warm-up, or not enabled), captured and launched
    /// (the first graphed step), or replayed (queue is not called). A replayed step raises the
    /// allocator's peaks to those the captured step reached (telemetry's memory figures).
    void run(const std::function<void()>& queue);

private:
    void capture(const std::function<void()>& queue);

    OpContext& ctx_;
    Allocator& alloc_;
    bool enabled_;
    int64_t warmup_, micro_batches_, input_elements_;
    int64_t steps_ = 0, replays_ = 0;
    void* graph_ = nullptr;  // the instantiated graph (cudaGraphExec_t)
    MemoryStats captured_;   // the peaks the captured step reached
    Buffer inputs_;          // I32 (micro_batches, input_elements) on the device
    std::unique_ptr<HostStaging> staging_;
};

}  // namespace mwb
