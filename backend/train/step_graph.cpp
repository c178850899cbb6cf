#include "backend/train/step_graph.h"

#include "backend/core/host_staging.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/error.h"

#include <algorithm>

namespace mwb {

GraphPlan::GraphPlan(bool enabled, int64_t warmup, int max_graphs)
    : enabled_(enabled), warmup_(warmup), max_graphs_(max_graphs) {
    MWB_CHECK(!enabled_ || (warmup_ >= 1 && max_graphs_ >= 1),
              "cuda graph: {} warm-up steps and at most {} graphs (at least 1 each)", warmup_, max_graphs_);
}

GraphPlan::Decision GraphPlan::next(int64_t micro_batches) {
    Decision d;
    if (!enabled_) return d;
    if (auto it = std::find(graphs_.begin(), graphs_.end(), micro_batches); it != graphs_.end()) {
        graphs_.erase(it);
        graphs_.push_back(micro_batches);  // the most recently used last
        d.action = Action::Replay;
        return d;
    }
    int64_t& eager = eager_[micro_batches];
    if (eager < warmup_) {
        ++eager;
        return d;
    }
    d.action = Action::Capture;
    if (static_cast<int>(graphs_.size()) == max_graphs_) {
        d.evict = graphs_.front();
        graphs_.erase(graphs_.begin());
    }
    graphs_.push_back(micro_batches);
    return d;
}

StepGraph::StepGraph(OpContext& ctx, Allocator& alloc, bool enabled, int64_t warmup_steps, int64_t max_micro_batches,
                     int64_t input_elements)
    : ctx_(ctx), alloc_(alloc), enabled_(enabled && ctx.device == Device::CUDA),
      max_micro_batches_(max_micro_batches), input_elements_(input_elements), plan_(enabled_, warmup_steps) {
    if (!enabled_) return;
    inputs_ = Buffer(alloc_, MemCategory::Data, max_micro_batches_ * input_elements_, DType::I32);
    staging_ = std::make_unique<HostStaging>();
}

StepGraph::~StepGraph() {
    if (graphs_.empty()) return;
    try {
        device::synchronize(ctx_.stream);  // a replay may still run
        for (auto& [count, g] : graphs_) device::destroy_graph(g.exec);
        alloc_.release_pool();
    } catch (const Error&) {
        // The GPU context may be gone at exit: the driver reclaims everything.
    }
}

TensorView StepGraph::inputs(int64_t m) const {
    MWB_CHECK(enabled_ && m >= 0 && m < max_micro_batches_, "cuda graph: no inputs for micro-batch {} of {}", m,
              max_micro_batches_);
    return slice_1d(inputs_.view(), m * input_elements_, input_elements_);
}

int32_t* StepGraph::host_inputs() {
    return static_cast<int32_t*>(staging_->next(inputs_.bytes()));
}

void StepGraph::upload_inputs() {
    // Only the prepared step's micro-batches: a smaller count reads the buffer's first part.
    const int64_t bytes = micro_batches_ * input_elements_ * static_cast<int64_t>(sizeof(int32_t));
    staging_->upload(inputs_.data(), 0, bytes, ctx_.stream);
    staging_->uploaded(ctx_.stream);
}

void StepGraph::prepare(int64_t micro_batches) {
    MWB_CHECK(!enabled_ || (micro_batches >= 1 && micro_batches <= max_micro_batches_),
              "cuda graph: a step of {} micro-batches (the inputs hold at most {})", micro_batches, max_micro_batches_);
    micro_batches_ = micro_batches;
    decision_ = plan_.next(micro_batches);
    if (decision_.evict >= 0) destroy(decision_.evict);
}

void StepGraph::destroy(int64_t micro_batches) {
    const auto it = graphs_.find(micro_batches);
    if (it == graphs_.end()) return;
    device::synchronize(ctx_.stream);  // its last replay may still run (rare: a count's graph is evicted)
    device::destroy_graph(it->second.exec);
    graphs_.erase(it);
    // The pool is shared: its blocks return to the cache only once no graph is left.
    if (graphs_.empty()) alloc_.release_pool();
}

void StepGraph::run(const std::function<void()>& queue) {
    // The step counts once its work is queued: inside `queue`, graphed() still says what this step is.
    switch (decision_.action) {
    case GraphPlan::Action::Eager:
        queue();
        break;
    case GraphPlan::Action::Capture:
        capture(queue);
        device::launch_graph(graphs_.at(micro_batches_).exec, ctx_.stream);  // a capture only records: run it now
        break;
    case GraphPlan::Action::Replay: {
        const Graph& g = graphs_.at(micro_batches_);
        ++replays_;
        alloc_.raise_peaks(g.captured);
        for (std::size_t i = 0; i < groups_.size(); ++i) groups_[i]->count_replay(g.traffic[i]);
        device::launch_graph(g.exec, ctx_.stream);
        break;
    }
    }
    ++steps_;
}

void StepGraph::capture(const std::function<void()>& queue) {
    // The capture's peaks alone (a replay reports them); the run's peaks are restored after. The
    // groups' traffic counted during the capture is the launch's: it stays, and each replay adds it.
    const MemoryStats before = alloc_.stats();
    std::vector<CommStats> traffic;
    for (const Communicator* c : groups_) traffic.push_back(c->stats());
    alloc_.reset_peaks();
    alloc_.begin_capture();
    device::begin_capture(ctx_.stream);
    Graph g;
    try {
        queue();
        g.exec = device::end_capture(ctx_.stream);
    } catch (...) {
        device::abort_capture(ctx_.stream);
        alloc_.end_capture();
        if (graphs_.empty()) alloc_.release_pool();
        alloc_.raise_peaks(before);
        throw;
    }
    alloc_.end_capture();
    g.captured = alloc_.stats();
    alloc_.raise_peaks(before);
    for (std::size_t i = 0; i < groups_.size(); ++i) {
        const CommStats& now = groups_[i]->stats();
        CommStats once;
        once.bytes_sent = now.bytes_sent - traffic[i].bytes_sent;
        once.calls = now.calls - traffic[i].calls;
        traffic[i] = once;  // seconds stay 0: a replay's time is the step's, not a call's
    }
    g.traffic = std::move(traffic);
    graphs_[micro_batches_] = std::move(g);
}

}  // namespace mwb
