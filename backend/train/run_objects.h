#pragma once
// The objects one rank trains with, wired together once per run: the device context and allocators,
// this rank's model chunks, the gradient reducer, the pipeline runner, the optimizer with its
// learning-rate schedule and loss scaler, and the token buffer of the micro-batch being read. The
// parts of the loop (train_step, evaluation, checkpointing, run_metadata) work on them.
#include "backend/config/config.h"
#include "backend/core/memory.h"
#include "backend/model/gpt_model.h"
#include "backend/optim/loss_scaler.h"
#include "backend/optim/lr_schedule.h"
#include "backend/optim/optimizer.h"
#include "backend/parallel/gradient_reducer.h"
#include "backend/parallel/parallel_context.h"
#include "backend/telemetry/flops.h"
#include "backend/train/pipeline_runner.h"

#include <memory>

namespace mwb {

struct RunObjects {
    RunObjects(const Config& cfg, ParallelContext& par);

    /// Memory the host reads and writes (tokens, checkpoint staging): the run's allocator on the CPU.
    Allocator& host_allocator() { return alloc.device() == Device::CPU ? alloc : host_alloc; }

    const Config& cfg;
    ParallelContext& par;
    OpContext ctx;
    Allocator alloc;       // the device's memory: model, optimizer, activations
    Allocator host_alloc;  // host memory beside a GPU allocator (unused on the CPU)
    GptDims dims;
    ModelPartition partition;
    TensorParallel tp;
    bool distributed;  // the distributed optimizer
    GptModel model;
    GradientReducer reducer;
    PipelineRunner runner;
    std::unique_ptr<Optimizer> optimizer;
    int64_t micro_batches;  // of a global batch of global_batch_size
    LrSchedule schedule;
    LossScaler scaler;
    FlopCounts flops;
    Buffer tokens;  // (B, S+1) of the micro-batch being read
    /// The GPU attention kernels resolved from runtime.attention_backend, and why (ctx.attention holds
    /// the choice); "cpu" on the CPU.
    std::string attention_backend = "cpu", attention_reason;
    /// runtime.enable_cuda_graph on a CUDA device: the training step is captured and replayed (StepGraph).
    bool cuda_graph = false;
};

}  // namespace mwb
