#include "backend/train/run_objects.h"

#include "backend/config/validate.h"
#include "mwb/kernels/device_runtime.h"

namespace mwb {

namespace {

/// The op context a run trains with: runtime.device as mwb-train resolved it ("auto" from other
/// callers means the CPU). On a GPU the step's ops run on a stream of their own (capturable into a
/// CUDA graph, unlike the legacy default stream), created once per rank and kept until the process
/// ends (the NCCL communicators hold it); it is ordered with the legacy default stream, so the blocking
/// copies outside the step (weight init, checkpoints, samples) stay behind the step's work. On GPUs of
/// more than one process the data groups become NCCL communicators joined to that stream by events;
/// the caller has made this rank's GPU current (mwb-train: the node-local rank's).
OpContext run_context(const Config& cfg, ParallelContext& par) {
    if (cfg.runtime.device != "cuda") return OpContext{Device::CPU, nullptr};
    static void* const step_stream = device::create_stream(/*ordered_with_default=*/true);
    if (par.world_size() > 1) par.use_device_collectives(step_stream);
    return OpContext{Device::CUDA, step_stream};
}

}  // namespace

RunObjects::RunObjects(const Config& config, ParallelContext& context)
    : cfg(config),
      par(context),
      ctx(run_context(cfg, par)),
      alloc(ctx.device),
      dims(GptDims::from_config(cfg)),
      partition(ModelPartition::for_stage(dims, par.pp_size(), par.coord().pp,
                                          cfg.parallel.num_layers_per_virtual_pipeline_stage)),
      tp(par.tp(), par.sp(), par.sequence_parallel(), ctx),
      distributed(cfg.parallel.use_distributed_optimizer),
      model(dims, partition, tp, RecomputePolicy::from_config(cfg.training), storage_dtype(cfg.training), ctx, alloc,
            distributed ? par.dp_size() : 1, /*gradients=*/true, gradient_dtype(cfg.training)),
      reducer(model.layout(), model.grads(), par, dims.tied_output, distributed, cfg.parallel.ddp_bucket_size, ctx),
      runner(model, par),
      micro_batches(num_micro_batches(cfg, par.world_size())),
      schedule(cfg.training),
      scaler(cfg.training),
      flops(flops_per_iteration(cfg)),
      tokens(host_allocator(), MemCategory::Data, dims.micro_batch * (dims.seq + 1), DType::I32) {
    // On a GPU, bf16 runs feed the GEMMs bf16 operands (tensor cores); weights and stored activations
    // are bf16 values already, dropout-scaled gradients are rounded as a bf16 tensor would be.
    if (ctx.device == Device::CUDA && model.storage() == DType::BF16) ctx.gemm_inputs = DType::BF16;
    if (ctx.device == Device::CUDA) device::set_deterministic(cfg.runtime.deterministic);
    if (ctx.device == Device::CUDA) {
        const AttentionBackendChoice a = resolve_attention_backend(
            cfg.runtime.attention_backend, cfg.runtime.deterministic, model.storage() != DType::F32);
        ctx.attention = a.backend;
        attention_backend = attention_backend_name(a.backend);
        attention_reason = a.reason;
        cuda_graph = cfg.runtime.enable_cuda_graph;
    }
    model.init_weights(static_cast<uint64_t>(cfg.training.seed));
    optimizer = std::make_unique<Optimizer>(model.layout(), model.params(), model.grads(), cfg.training,
                                            model.storage(), ctx, alloc, &par, reducer.shard());
}

}  // namespace mwb
