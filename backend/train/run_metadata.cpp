#include "backend/train/run_metadata.h"

#include "backend/config/config_io.h"
#include "backend/config/validate.h"
#include "backend/core/build_info.h"
#include "backend/telemetry/run_dir.h"
#include "backend/train/records.h"
#include "backend/train/interval_stats.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <vector>

namespace mwb {

nlohmann::json RunMetadata::topology() const {
    const ParallelContext& par = o_.par;
    return {{"world_size", par.world_size()},
            {"tensor_model_parallel_size", par.tp_size()},
            {"pipeline_model_parallel_size", par.pp_size()},
            {"data_parallel_size", par.dp_size()},
            {"virtual_pipeline_chunks", o_.model.num_chunks()},
            {"sequence_parallel", par.sequence_parallel()},
            {"distributed_optimizer", o_.distributed},
            {"rank_order", "tp-dp-pp"},
            {"device", device_name(o_.ctx.device)},
            {"threads", ops::num_threads()}};
}

void RunMetadata::announce(const Progress& p) {
    ParallelContext& par = o_.par;
    const Config& cfg = o_.cfg;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    std::vector<char> hosts(static_cast<std::size_t>(par.world_size()) * sizeof host);
    par.world().gather(host, hosts.data(), sizeof host, 0);
    // Parameters of the whole model: every rank counts what it owns once (see Optimizer).
    double owned = 0;
    for (const ParamInfo& pi : o_.model.layout())
        if (!pi.tied_copy && (pi.split_dim >= 0 || par.coord().tp == 0) && par.coord().dp == 0)
            owned += static_cast<double>(pi.numel);
    par.world().all_reduce_sum(&owned, 1);
    if (par.world_rank() != 0) return;

    nlohmann::json host_list = nlohmann::json::array();
    for (int r = 0; r < par.world_size(); ++r) host_list.push_back(std::string(hosts.data() + r * sizeof host));
    const auto& m = cfg.model;
    const auto params = static_cast<int64_t>(owned);
    nlohmann::json run = {
        {"run_id", dir_->run_id()},
        {"config", to_json(cfg)},
        {"derived",
         {{"padded_vocab_size", padded_vocab_size(cfg)},
          {"num_micro_batches", o_.micro_batches},
          {"parameters", params},
          {"model_flops_per_iteration", o_.flops.model},
          {"hardware_flops_per_iteration", o_.flops.hardware},
          {"attention_backend", o_.attention_backend},
          {"cuda_graph", o_.cuda_graph}}},
        {"topology", topology()},
        {"hosts", host_list},
        {"data", in_.data_description},
        {"accepted_flags", in_.accepted_flags},
        {"build", build_info()},
        {"resumed_from_iteration", p.iteration},
    };
    dir_->write_run_json(run);
    ipc::RunStartRecord start;
    start.config = run["config"];
    start.derived = run["derived"];
    start.topology = run["topology"];
    start.hosts = host_list.get<std::vector<std::string>>();
    start.iteration = p.iteration;
    publish_record(dir_, start);
    if (in_.print_progress) {
        spdlog::info("model: {} layers, hidden {}, {} heads, seq {}, vocab {} (padded {}): {:.2f}M parameters",
                     m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, model_vocab_size(cfg),
                     padded_vocab_size(cfg), static_cast<double>(params) / 1e6);
        if (par.world_size() > 1)
            spdlog::info("layout: {} ranks = TP {} x PP {} x DP {}{}{}{}", par.world_size(), par.tp_size(),
                         par.pp_size(), par.dp_size(), par.sequence_parallel() ? ", sequence parallel" : "",
                         o_.model.num_chunks() > 1 ? fmt::format(", {} virtual stages per rank", o_.model.num_chunks())
                                                   : "",
                         o_.distributed ? ", distributed optimizer" : "");
        spdlog::info("batch: {} x {} micro-batches x {} data-parallel = {} samples/iteration; {} | {} thread(s), {}",
                     cfg.training.micro_batch_size, o_.micro_batches, par.dp_size(), cfg.training.global_batch_size,
                     in_.data_description, ops::num_threads(),
                     cfg.training.bf16 ? "bf16 (emulated)" : cfg.training.fp16 ? "fp16 (emulated)" : "fp32");
        if (!o_.attention_reason.empty()) spdlog::info("attention_backend {}", o_.attention_reason);
        if (o_.cuda_graph)
            spdlog::info("cuda graph: the training step is captured after {} eager step(s) and replayed",
                         cfg.runtime.cuda_graph_warmup_steps);
        spdlog::info("run directory: {}", dir_->path().string());
    }
}

void RunMetadata::finish(const std::string& status, const std::string& reason, const Progress& p) {
    if (!dir_) return;
    const MemoryStats mem = o_.alloc.stats();
    publish_record(dir_, ipc::RunEndRecord{status, reason,
                                           ipc::RunTotals{p.iteration, p.consumed_samples, p.skipped, memory_record(mem)}});
}

}  // namespace mwb
