#pragma once
// The state a run ends with, layout-independent: every tensor of its last checkpoint (fp32 weights and
// both Adam moments) assembled into the global tensor by the engine's own sharded loader, so runs
// under different layouts compare element by element. The comparison is a relative L2 distance per
// tensor: a gradient summed twice or a shard applied to the wrong rows moves one tensor by O(1), while
// reduction-order rounding moves it by ~1e-7.
#include "backend/checkpoint/checkpoint.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace mwb::test {

using GlobalTensors = std::map<std::string, std::vector<float>>;

/// The global tensors of the newest checkpoint under `save_dir`, by name ("param/...", "exp_avg/...").
inline GlobalTensors final_state(const std::filesystem::path& save_dir) {
    const std::filesystem::path iteration = resolve_checkpoint_dir(save_dir);
    std::ifstream in(iteration / "metadata.json");
    const auto meta = nlohmann::json::parse(in);
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& t : meta.at("tensors")) shapes[t.at("name")] = t.at("global_shape").get<std::vector<int64_t>>();
    GlobalTensors out;
    std::vector<CheckpointTensor> wanted;
    for (const auto& [name, shape] : shapes) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        auto& buffer = out[name];
        buffer.assign(static_cast<std::size_t>(n), NAN);
        wanted.push_back({.name = name, .global_shape = shape, .shape = shape, .dest = buffer.data()});
    }
    load_checkpoint(iteration, wanted);  // every element covered, checksums verified
    return out;
}

/// ||a - b|| / ||b|| of one tensor (0 when both are zero).
inline double relative_distance(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0, n = 0;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
        d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        n += double(b[i]) * b[i];
    }
    return n == 0 ? std::sqrt(d) : std::sqrt(d / n);
}

/// Zeroes the key rows of every linear_qkv.bias, and of its Adam moments. Softmax is invariant to
/// adding a constant to every score of a row, and the key bias adds q·b_k to all of a query's scores:
/// its true gradient is exactly zero, what it receives is rounding noise, and Adam normalises noise to
/// full-size steps, so those rows differ between layouts by design. The query and value rows stay.
/// Megatron's fused layout: per query group, its query heads, then one key head, then one value head.
inline void drop_key_bias(GlobalTensors& state, int64_t groups, int64_t heads_per_group, int64_t head_dim) {
    for (auto& [name, t] : state) {
        if (!name.ends_with("linear_qkv.bias")) continue;
        const int64_t per_group = (heads_per_group + 2) * head_dim;
        for (int64_t g = 0; g < groups; ++g)
            for (int64_t i = 0; i < head_dim; ++i)
                t[static_cast<std::size_t>(g * per_group + heads_per_group * head_dim + i)] = 0;
    }
}

/// "" when `got` holds the same tensors as `want`, each within `tolerance` relative L2 distance; else
/// the first that differs, with its distance.
inline std::string compare_states(const GlobalTensors& got, const GlobalTensors& want, double tolerance) {
    if (got.size() != want.size())
        return "the checkpoints hold " + std::to_string(got.size()) + " and " + std::to_string(want.size()) +
               " tensors";
    for (const auto& [name, w] : want) {
        const auto it = got.find(name);
        if (it == got.end()) return name + " is missing";
        if (it->second.size() != w.size()) return name + " has another shape";
        const double d = relative_distance(it->second, w);
        if (!(d <= tolerance))
            return name + ": relative distance " + std::to_string(d) + " to the single process (tolerance " +
                   std::to_string(tolerance) + ")";
    }
    return {};
}

/// The largest relative distance over all tensors (for the report of a passing run).
inline double max_distance(const GlobalTensors& got, const GlobalTensors& want) {
    double m = 0;
    for (const auto& [name, w] : want)
        if (const auto it = got.find(name); it != got.end()) m = std::max(m, relative_distance(it->second, w));
    return m;
}

}  // namespace mwb::test
