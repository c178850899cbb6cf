#include "train/pipeline_runner.h"

#include "mwb/kernels/error.h"

#include <chrono>
#include <list>

namespace mwb {

namespace {

/// A send in flight and the buffer it reads from, kept alive until it completes.
struct InFlight {
    Buffer buffer;
    std::unique_ptr<PendingSend> send;
};

}  // namespace

PipelineResult PipelineRunner::run(int64_t micro_batches, bool training,
                                   const std::function<MicroBatch(int64_t, bool)>& micro) {
    using Clock = std::chrono::steady_clock;
    const auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    const int p = par_.pp_size(), r = par_.coord().pp, v = model_.num_chunks();
    const int64_t last_stage = static_cast<int64_t>(p) * v - 1;
    const int64_t rows = model_.local_rows(), hidden = model_.dims().hidden;
    Communicator& pp = par_.pp();
    // Message tags name (micro-batch, virtual stage, direction) so receives match their sends.
    const auto tag = [&](int64_t m, int64_t stage, int direction) {
        const int64_t t = 2 * (m * (last_stage + 1) + stage) + direction;
        MWB_CHECK(t < (int64_t{1} << 30), "pipeline message tag overflow ({} micro-batches)", micro_batches);
        return static_cast<int>(t);
    };
    std::list<InFlight> sends;
    PipelineResult result;

    for (const PipelineAction& a : pipeline_schedule(p, r, v, micro_batches, !training)) {
        const int64_t stage = static_cast<int64_t>(a.chunk) * p + r;
        const bool needs_tokens = stage == 0 || stage == last_stage;
        if (a.kind == PipelineAction::Kind::Forward) {
            Buffer input;
            if (stage > 0) {
                input = Buffer(model_.allocator(), MemCategory::Activations, rows * hidden);
                pp.recv(input.f32(), rows * hidden, (r - 1 + p) % p, tag(a.micro, stage - 1, 0));
            }
            MicroBatch mb = micro(a.micro, needs_tokens);
            mb.id = a.micro;
            mb.training = training;
            const auto t0 = Clock::now();
            ForwardResult out = model_.forward(a.chunk, mb, std::move(input));
            result.forward_seconds += seconds_since(t0);
            if (stage < last_stage) {
                auto send = pp.send(out.output.f32(), rows * hidden, (r + 1) % p, tag(a.micro, stage, 0));
                sends.push_back({std::move(out.output), std::move(send)});
            } else {
                result.loss_sum += out.loss;
            }
        } else {
            Buffer grad;
            if (stage < last_stage) {
                grad = Buffer(model_.allocator(), MemCategory::Workspace, rows * hidden);
                pp.recv(grad.f32(), rows * hidden, (r + 1) % p, tag(a.micro, stage, 1));
            }
            const auto t0 = Clock::now();
            Buffer grad_in = model_.backward(a.chunk, a.micro, std::move(grad));
            result.backward_seconds += seconds_since(t0);
            if (stage > 0) {
                auto send = pp.send(grad_in.f32(), rows * hidden, (r - 1 + p) % p, tag(a.micro, stage - 1, 1));
                sends.push_back({std::move(grad_in), std::move(send)});
            }
        }
        // Free buffers of completed sends as we go (they would otherwise pile up over the iteration).
        sends.remove_if([](InFlight& f) { return f.send->done(); });
    }
    for (InFlight& f : sends) f.send->wait();
    return result;
}

}  // namespace mwb
