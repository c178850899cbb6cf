#pragma once
// Parameter counts of the whole model and of the shard each rank holds. Ranks keep their parameters in
// one arena whose tensors start at multiples of kArenaAlignment elements (backend/core/arena_alignment.h,
// the rule ParamLayout uses), so the bytes of weights, gradients and optimizer state are arena elements ×
// element size, padding included.
#include "backend/core/arena_alignment.h"
#include "mwb/planner/layout.h"

#include <cstdint>
#include <vector>

namespace mwb::planner {

struct StageParameters {
    int64_t parameters = 0;      ///< held by one rank of this pipeline stage (its tensor-parallel shard)
    int64_t arena_elements = 0;  ///< the same with each tensor padded to kArenaAlignment (and, with the
                                 ///< distributed optimizer, the arena to a multiple of DP × kArenaAlignment)
    int layers = 0;
    bool embedding = false;  ///< holds the word and position embeddings (first stage)
    bool head = false;       ///< holds the final norm and the output layer (last stage)
};

struct ParameterCounts {
    int64_t total = 0;               ///< the whole model, unsharded, as the engine holds it (padded vocabulary);
                                     ///< tied embeddings counted once
    int64_t vocabulary_padding = 0;  ///< rows added by padding the vocabulary (V − V_unpadded) × h, per
                                     ///< embedding matrix; total − this is the published count
    int64_t per_layer = 0;           ///< one transformer layer, unsharded: 12h² + 13h with f = 4h (LayerNorm)
    int64_t embedding = 0;           ///< word (V·h) + learned position (P·h) embeddings
    int64_t output_layer = 0;        ///< V·h when untied, else 0
    int64_t final_norm = 0;
    std::vector<StageParameters> stages;  ///< one per pipeline stage (rank r holds chunks r, r+p, ...)
    int64_t unpadded() const { return total - vocabulary_padding; }  ///< with the tokenizer's vocabulary
    int64_t max_per_rank() const;
    int64_t max_arena_elements() const;
};

ParameterCounts count_parameters(const ModelShape& m, const Layout& l);

}  // namespace mwb::planner
