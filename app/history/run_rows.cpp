#include "app/history/run_rows.h"

#include "mwb/ipc/json_get.h"

namespace mwb::app {

namespace {

RunRow make_row(store::Store& st, const store::RunRecord& r) {
    RunRow row;
    row.uid = r.uid;
    row.name = r.name;
    row.status = r.status;
    row.reason = r.reason;
    row.notes = r.notes;
    row.created = r.created;
    row.finished = r.finished;
    row.iteration = r.iteration;
    row.train_iters = r.train_iters;
    row.final_loss = r.last_loss;
    row.tags = r.tags;
    row.model = describe_model(r.config);
    row.layout = describe_layout(r.topology);
    if (r.derived.is_object() && r.derived.contains("parameters") && r.derived["parameters"].is_number())
        row.parameters = r.derived["parameters"].get<double>();
    if (r.config.is_object() && r.config.contains("run_dir") && r.config["run_dir"].is_string())
        row.run_dir = r.config["run_dir"].get<std::string>();
    const auto flatten = [&row](const nlohmann::json& o, const std::string& prefix) {
        if (!o.is_object()) return;
        for (const auto& [k, v] : o.items())
            if (v.is_primitive() && !v.is_null())
                row.settings[prefix + k] = v.is_string() ? v.get<std::string>() : v.dump();
    };
    flatten(r.config, "");
    flatten(r.topology, "topology.");
    // the last step record's throughput: one bucket over the last iteration
    store::SeriesQuery q;
    q.buckets = 1;
    q.x_from = r.iteration;
    const auto tps = st.series(r.uid, "tokens_per_sec", q);
    if (!tps.buckets.empty()) row.tokens_per_sec = tps.buckets.back().y_mean;
    return row;
}

}  // namespace

const std::string* setting(const RunRow& row, const std::string& key) {
    static const std::map<std::string, std::string> kShort = {
        {"tp", "topology.tensor_model_parallel_size"},
        {"pp", "topology.pipeline_model_parallel_size"},
        {"dp", "topology.data_parallel_size"},
        {"world", "topology.world_size"},
        {"layers", "num_layers"},
        {"hidden", "hidden_size"},
        {"heads", "num_attention_heads"},
        {"seq", "seq_length"},
        {"mbs", "micro_batch_size"},
        {"gbs", "global_batch_size"},
    };
    for (const std::string& k : {key, "topology." + key, kShort.count(key) ? kShort.at(key) : std::string()}) {
        if (k.empty()) continue;
        if (const auto it = row.settings.find(k); it != row.settings.end()) return &it->second;
    }
    return nullptr;
}

std::optional<double> setting_number(const RunRow& row, const std::string& key) {
    const std::string* v = setting(row, key);
    if (!v) return std::nullopt;
    try {
        std::size_t used = 0;
        const double d = std::stod(*v, &used);
        return used == v->size() ? std::optional<double>(d) : std::nullopt;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

std::string describe_model(const nlohmann::json& c) {
    if (!c.is_object() || !c.contains("num_layers")) return {};
    std::string s = std::to_string(ipc::get_integral(c, "num_layers").value_or(0)) + " L · " +
                    std::to_string(ipc::get_integral(c, "hidden_size").value_or(0)) + " H · " +
                    std::to_string(ipc::get_integral(c, "num_attention_heads").value_or(0)) + " A";
    if (c.contains("seq_length")) s += " · seq " + std::to_string(ipc::get_integral(c, "seq_length").value_or(0));
    return s;
}

std::string describe_layout(const nlohmann::json& t) {
    if (!t.is_object() || t.empty()) return {};
    const int64_t world = ipc::get_integral(t, "world_size").value_or(1);
    std::string s = "TP " + std::to_string(ipc::get_integral(t, "tensor_model_parallel_size").value_or(1)) + " · PP " +
                    std::to_string(ipc::get_integral(t, "pipeline_model_parallel_size").value_or(1)) + " · DP " +
                    std::to_string(ipc::get_integral(t, "data_parallel_size").value_or(1));
    s += " (" + std::to_string(world) + (world == 1 ? " rank)" : " ranks)");
    return s;
}

std::vector<RunRow> load_run_rows(store::Store& st) {
    std::vector<RunRow> rows;
    store::RunFilter all;
    all.limit = 1 << 30;
    for (const auto& summary : st.runs(all))
        if (const auto record = st.run(summary.uid)) rows.push_back(make_row(st, *record));
    return rows;
}

std::optional<RunRow> load_run_row(store::Store& st, const std::string& uid) {
    const auto record = st.run(uid);
    if (!record) return std::nullopt;
    return make_row(st, *record);
}

}  // namespace mwb::app
