#pragma once
// Memory per rank by the tracking allocator's categories (weights, gradients, optimizer, activations,
// workspace, data — backend/core/memory.h), for every pipeline stage.
//
// Static state (weights, gradients, optimizer state, the token buffer, persistent workspace) comes
// from the arena. Activations, workspace and per-micro-batch token ids come from replaying the rank's
// pipeline schedule (backend/parallel/schedule.h: 1F1B, interleaved) at the granularity of one model
// chunk's forward or backward, each of which replays the engine's allocations in order
// (backend/model/gpt_model.cpp, transformer_layer.cpp) — so the per-category peaks and the
// simultaneous peak are what the allocator reports. Under 1F1B stage r of p holds min(m, p − r)
// micro-batches at its peak; with v chunks per rank min(m·v, 2(p − r − 1) + (v − 1)p + 1) chunks of
// L/(pv) layers, on the first stage L·(1 + (p − 1)/(pv)) layers' worth (Korthikanti et al. 2022).
//
// Sends: a chunk's output (activations) or input gradient (workspace) goes out by a non-blocking send
// and the pipeline runner frees it once the send has completed, checking after every pass. The model:
// it is freed after the rank's next pass (an eager MPI send — small messages, shared memory — has
// completed by then; measured so). A message above MPI's eager limit completes only when the
// neighbour posts its receive, so on real runs a buffer may live a few passes longer: the measured
// peak can then exceed the prediction by one (s/t·b·h) buffer per such send.
#include "backend/core/memory.h"
#include "mwb/planner/activations.h"
#include "mwb/planner/parameters.h"

#include <array>
#include <cstdint>
#include <vector>

namespace mwb::planner {

using CategoryBytes = std::array<int64_t, kMemCategories>;  ///< indexed by MemCategory

struct StageMemory {
    int stage = 0;
    int layers = 0;
    int in_flight = 1;                ///< micro-batches (chunks when interleaved) whose activations it holds at most
    int64_t kept_per_microbatch = 0;  ///< activations one micro-batch (chunk) keeps from its forward to its backward
    CategoryBytes current{};          ///< between iterations (what mem.by_category[*].current reports at a log point)
    CategoryBytes peak{};             ///< per-category peaks (mem.by_category[*].peak)
    int64_t allocated = 0;            ///< Σ current (mem.allocated)
    int64_t peak_total = 0;           ///< simultaneous peak (mem_peak_bytes); at most Σ peak
};

struct MemoryInputs {
    const ModelShape& model;
    const Layout& layout;
    const Precision& precision;
    const DeviceSpec& device;
    const ParameterCounts& parameters;
    Accounting accounting = Accounting::Engine;
};

/// What one pass (a chunk's forward or backward) does to a rank's memory, relative to before it.
struct PassProfile {
    int64_t act_peak = 0, ws_peak = 0, data_peak = 0, total_peak = 0;  ///< highest increase during the pass
    int64_t act_end = 0, ws_end = 0, data_end = 0;                     ///< change when it is over
    int64_t sent_act = 0, sent_ws = 0;  ///< of which a buffer sent to a neighbour, freed after the next pass
};

/// One model chunk of `layers` layers; first: it holds the embedding (virtual stage 0); last: the head.
PassProfile forward_profile(const MemoryInputs& in, int layers, bool first, bool last);
PassProfile backward_profile(const MemoryInputs& in, int layers, bool first, bool last);

std::vector<StageMemory> stage_memory(const MemoryInputs& in);

}  // namespace mwb::planner
