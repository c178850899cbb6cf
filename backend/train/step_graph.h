#pragma once
// The training step as CUDA graphs (runtime.enable_cuda_graph; docs/gpu.md, "CUDA graph of the
// training step"), one per micro-batch count (a batch ramp changes it): for each count, the first
// cuda_graph_warmup_steps steps at that count run eagerly (the caching allocator, the scratch slots
// and the cuBLASLt/cuDNN plans reach their sizes); the next one is captured on the op stream — the
// forward and backward passes of every micro-batch, the pipeline's sends and receives, the gradient
// reduction and the optimizer, NCCL collectives included — with every block the allocator hands out or
// takes back meanwhile owned by the graphs' shared pool (Allocator::begin_capture), instantiated and
// launched; every later step at that count replays it. At most GraphPlan::kMaxGraphs graphs are kept
// (the least recently used one goes first); they share one pool, so its size is the largest capture's
// need, not their sum. What changes from step to step reaches a graph through memory it reads: the
// step block (Optimizer::begin_step: learning rate, loss scale, iteration for the dropout streams, the
// loss gradient's scale) and the micro-batches' ids and targets (inputs(): written before each
// launch, sized for the largest count). The end-of-step read stays outside; evaluation, checkpoints and
// samples run eagerly between replays. Every rank decides the same thing for the same step (the count
// and the step number are the same everywhere): NCCL needs every rank of a group to capture and replay
// the same sequence. The communicators' byte counts are counted once at the capture and added again at
// each replay (count_replays_of). On the CPU, or without the flag, every step runs eagerly.
#include "backend/core/memory.h"
#include "backend/parallel/communicator.h"
#include "mwb/kernels/ops.h"

#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace mwb {

class HostStaging;

/// Which way each step runs, host-only bookkeeping (no CUDA: tested on the CPU): eager until its
/// micro-batch count has had `warmup` eager steps, then captured once, then replayed; at most
/// kMaxGraphs counts keep a graph, the least recently used giving way to a new one.
class GraphPlan {
public:
    static constexpr int kMaxGraphs = 4;
    enum class Action { Eager, Capture, Replay };
    struct Decision {
        Action action = Action::Eager;
        int64_t evict = -1;  ///< a Capture's: the count whose graph goes first (-1: none)
    };
    GraphPlan(bool enabled, int64_t warmup, int max_graphs = kMaxGraphs);
    /// The step with `micro_batches` micro-batches: the decision, recorded (a Capture is assumed to
    /// succeed: a failed one throws, and the run ends).
    Decision next(int64_t micro_batches);
    /// The counts that hold a graph, least recently used first.
    const std::vector<int64_t>& graphs() const { return graphs_; }

private:
    bool enabled_;
    int64_t warmup_;
    int max_graphs_;
    std::map<int64_t, int64_t> eager_;  // micro-batch count -> eager steps run at it
    std::vector<int64_t> graphs_;
};

class StepGraph {
public:
    /// `enabled`: the run captures (a CUDA context and runtime.enable_cuda_graph); `warmup_steps`
    /// eager steps first at each micro-batch count. `max_micro_batches`: the largest count of the run
    /// (the inputs' buffer). `input_elements`: I32 elements of one micro-batch's inputs (ids, targets).
    StepGraph(OpContext& ctx, Allocator& alloc, bool enabled, int64_t warmup_steps, int64_t max_micro_batches,
              int64_t input_elements);
    ~StepGraph();
    StepGraph(const StepGraph&) = delete;
    StepGraph& operator=(const StepGraph&) = delete;

    bool enabled() const { return enabled_; }
    /// The communicators whose traffic a graph holds: at a capture their stats' growth is recorded
    /// (bytes and calls; the capture's host time is not transfer time), and each replay adds it again
    /// (Communicator::count_replay), so that byte counts mean the same graphed or eager.
    void count_replays_of(std::vector<Communicator*> groups) { groups_ = std::move(groups); }

    /// Decides how the next step, of `micro_batches` micro-batches, runs (GraphPlan; evicts a graph
    /// the plan lets go). Call once per step, before its inputs are staged and run() is called.
    void prepare(int64_t micro_batches);
    /// Whether the prepared step captures or replays (its micro-batches' inputs must be in inputs() then).
    bool graphed() const { return decision_.action != GraphPlan::Action::Eager; }
    /// Steps run so far (eager and graphed), replays among them, and the graphs held now.
    int64_t steps() const { return steps_; }
    int64_t replays() const { return replays_; }
    int64_t graphs() const { return static_cast<int64_t>(graphs_.size()); }

    /// Micro-batch m's inputs (I32, ids then targets) in the fixed device buffer a graphed step reads.
    TensorView inputs(int64_t m) const;
    /// The host buffer to lay all micro-batches' inputs out in (micro-batch m at m · input_elements),
    /// then upload_inputs() queues its copy into inputs() on the op stream, before the launch.
    int32_t* host_inputs();
    void upload_inputs();

    /// The prepared step's queued work `queue`: run eagerly (warm-up, or not enabled), captured and
    /// launched (the first graphed step at its count), or replayed (queue is not called). A replayed
    /// step raises the allocator's peaks to those its capture reached (telemetry's memory figures).
    void run(const std::function<void()>& queue);

private:
    struct Graph {
        void* exec = nullptr;              // the instantiated graph (cudaGraphExec_t)
        MemoryStats captured;              // the peaks the captured step reached
        std::vector<CommStats> traffic;    // per groups_ entry: what one replay sends
    };
    void capture(const std::function<void()>& queue);
    void destroy(int64_t micro_batches);

    OpContext& ctx_;
    Allocator& alloc_;
    bool enabled_;
    int64_t max_micro_batches_, input_elements_;
    int64_t steps_ = 0, replays_ = 0;
    GraphPlan plan_;
    GraphPlan::Decision decision_;
    int64_t micro_batches_ = 0;           // the prepared step's
    std::map<int64_t, Graph> graphs_;     // micro-batch count -> its graph
    std::vector<Communicator*> groups_;
    Buffer inputs_;          // I32 (max_micro_batches, input_elements) on the device
    std::unique_ptr<HostStaging> staging_;
};

}  // namespace mwb
