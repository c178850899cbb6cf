#include "mwb/planner/report.h"

namespace mwb::planner {

namespace {

nlohmann::json layout_json(const Plan& p) {
    const Layout& l = p.layout;
    const auto& t = p.config.training;
    return {{"world_size", l.world},
            {"tensor_model_parallel_size", l.tp},
            {"pipeline_model_parallel_size", l.pp},
            {"data_parallel_size", l.dp},
            {"virtual_pipeline_chunks", l.vp},
            {"sequence_parallel", l.sp},
            {"use_distributed_optimizer", l.distributed_optimizer},
            {"micro_batch_size", l.micro_batch},
            {"global_batch_size", l.global_batch},
            {"num_micro_batches", l.micro_batches},
            {"recompute_granularity", t.recompute_granularity},
            {"recompute_method", t.recompute_method},
            {"recompute_num_layers", t.recompute_num_layers},
            {"precision", t.bf16   ? "bf16"
                          : t.fp16 ? "fp16"
                                   : "fp32"},
            {"summary", describe_layout(p)}};
}

nlohmann::json cluster_json(const Cluster& c) {
    const DeviceSpec& d = c.device;
    return {{"device", d.name},
            {"gpus_per_node", c.gpus_per_node},
            {"nodes", c.nodes},
            {"world_size", c.world_size()},
            {"peak_flops_16bit", d.peak_flops_16bit},
            {"peak_flops_fp32", d.peak_flops_fp32},
            {"memory_bytes", d.memory_bytes},
            {"memory_limit_bytes", c.memory_limit()},
            {"intra_node_bandwidth", d.intra_node_bandwidth},
            {"inter_node_bandwidth", d.inter_node_bandwidth},
            {"compute_efficiency", d.compute_efficiency},
            {"comm_efficiency", d.comm_efficiency}};
}

nlohmann::json comm_json(const StageCommunication& s) {
    nlohmann::json sent = nlohmann::json::object(), payload = nlohmann::json::object(), calls = nlohmann::json::array();
    for (int g = 0; g < kGroups; ++g) {
        const std::string name(group_name(static_cast<Group>(g)));
        sent[name] = s.bytes_sent[static_cast<std::size_t>(g)];
        payload[name] = s.payload[static_cast<std::size_t>(g)];
    }
    for (const Collective& c : s.collectives)
        calls.push_back({{"what", c.what},
                         {"group", group_name(c.group)},
                         {"op", op_name(c.op)},
                         {"group_size", c.group_size},
                         {"calls", c.calls},
                         {"payload_bytes_per_call", c.payload},
                         {"bytes_sent", c.bytes_sent}});
    return {{"stage", s.stage}, {"bytes_sent", sent}, {"payload_bytes", payload}, {"collectives", calls}};
}

}  // namespace

nlohmann::json memory_json(const StageMemory& s) {
    nlohmann::json by = nlohmann::json::object();
    for (int c = 0; c < kMemCategories; ++c)
        by[std::string(category_name(static_cast<MemCategory>(c)))] = {
            {"current", s.current[static_cast<std::size_t>(c)]}, {"peak", s.peak[static_cast<std::size_t>(c)]}};
    return {{"stage", s.stage},         {"layers", s.layers},
            {"in_flight", s.in_flight}, {"kept_activations_per_microbatch", s.kept_per_microbatch},
            {"allocated", s.allocated}, {"peak", s.peak_total},
            {"by_category", by}};
}

nlohmann::json to_json(const Plan& p) {
    nlohmann::json issues = nlohmann::json::array();
    for (const ConfigIssue& i : p.issues) issues.push_back({{"field", i.field}, {"message", i.message}});
    nlohmann::json j = {{"schema", "mwb.plan/1"},
                        {"estimated", p.estimated},
                        {"fits", p.fits},
                        {"runnable", p.runnable()},
                        {"issues", issues},
                        {"notes", p.notes},
                        {"cluster", cluster_json(p.cluster)},
                        {"accounting", p.options.accounting == Accounting::Engine ? "engine" : "megatron"}};
    if (!p.estimated) return j;
    j["layout"] = layout_json(p);
    const ModelShape& m = p.model;
    j["model"] = {{"num_layers", m.L},
                  {"hidden_size", m.h},
                  {"num_attention_heads", m.a},
                  {"ffn_hidden_size", m.f},
                  {"seq_length", m.s},
                  {"padded_vocab_size", m.V},
                  {"max_position_embeddings", m.P},
                  {"tied", m.tied},
                  {"vocab_size", m.V_unpadded},
                  {"num_query_groups", m.G},
                  {"kv_channels", m.d},
                  {"swiglu", m.swiglu},
                  {"add_bias_linear", m.bias},
                  {"qkv_bias", m.qkv_bias},
                                    {"rotary_dim", m.rotary_dim}};
    nlohmann::json stages = nlohmann::json::array();
    for (const StageParameters& s : p.parameters.stages)
        stages.push_back({{"parameters", s.parameters}, {"arena_elements", s.arena_elements}, {"layers", s.layers}});
    j["parameters"] = {{"total", p.parameters.total},
                       {"unpadded", p.parameters.unpadded()},
                       {"per_layer", p.parameters.per_layer},
                       {"embedding", p.parameters.embedding},
                       {"output_layer", p.parameters.output_layer},
                       {"max_per_rank", p.parameters.max_per_rank()},
                       {"stages", stages}};
    nlohmann::json mem_stages = nlohmann::json::array();
    for (const StageMemory& s : p.memory) mem_stages.push_back(memory_json(s));
    j["memory"] = {{"limit_bytes", p.memory_limit},
                   {"most_loaded_stage", p.most_loaded_stage},
                   {"per_rank", memory_json(p.most_loaded())},
                   {"stages", mem_stages}};
    j["flops"] = {{"model_per_iteration", p.flops.model}, {"hardware_per_iteration", p.flops.hardware}};
    nlohmann::json comm_stages = nlohmann::json::array(), max_sent = nlohmann::json::object();
    for (const StageCommunication& s : p.communication) comm_stages.push_back(comm_json(s));
    const auto sent = p.max_bytes_sent();
    for (int g = 0; g < kGroups; ++g)
        max_sent[std::string(group_name(static_cast<Group>(g)))] = sent[static_cast<std::size_t>(g)];
    j["communication"] = {{"algorithm", "ring"}, {"bytes_sent", max_sent}, {"stages", comm_stages}};
    const Timing& t = p.time;
    j["time"] = {{"peak_flops", t.peak_flops},
                 {"compute_efficiency", t.compute_efficiency},
                 {"slowest_stage", t.slowest_stage},
                 {"compute_s", t.compute_s},
                 {"tp_sp_comm_s", t.tp_s},
                 {"pp_comm_s", t.pp_s},
                 {"bubble_s", t.bubble_s},
                 {"bubble_fraction", t.bubble_fraction},
                 {"dp_comm_s", t.dp_s},
                 {"embedding_comm_s", t.embedding_s},
                 {"optimizer_s", t.optimizer_s},
                 {"iteration_s", t.iteration_s},
                 {"tokens_per_s", t.tokens_per_s},
                 {"model_tflops_per_device", t.model_flops_per_s_per_device / 1e12},
                 {"mfu", t.mfu},
                 {"hfu", t.hfu},
                 {"train_tokens", t.train_tokens},
                 {"days", t.days}};
    return j;
}

nlohmann::json to_json(const SearchResult& r) {
    const auto entry = [](const RankedLayout& l) {
        const Plan& p = l.plan;
        return nlohmann::json{{"summary", l.summary},
                              {"reason", l.reason},
                              {"layout", layout_json(p)},
                              {"tokens_per_s", p.time.tokens_per_s},
                              {"iteration_s", p.time.iteration_s},
                              {"mfu", p.time.mfu},
                              {"memory_peak_bytes", p.most_loaded().peak_total},
                              {"memory_limit_bytes", p.memory_limit}};
    };
    nlohmann::json ranked = nlohmann::json::array(), big = nlohmann::json::array(), rejected = nlohmann::json::object();
    for (const RankedLayout& l : r.ranked) ranked.push_back(entry(l));
    for (const RankedLayout& l : r.too_big) big.push_back(entry(l));
    for (const Rejection& x : r.rejected) rejected[x.reason] = x.count;
    return {{"schema", "mwb.plan-search/1"}, {"evaluated", r.evaluated}, {"runnable", r.runnable},
            {"seconds", r.seconds},          {"ranked", ranked},         {"too_big", big},
            {"rejected", rejected}};
}

}  // namespace mwb::planner
