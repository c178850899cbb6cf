#include "backend/train/pipeline_runner.h"

#include "mwb/kernels/error.h"

#include <chrono>
#include <list>
#include <span>
#include <vector>

namespace mwb {

namespace {

/// Sends in flight and the buffers they read from, kept alive until they complete.
struct InFlight {
    std::vector<Buffer> buffers;
    std::unique_ptr<PendingSend> sends;
};

}  // namespace

PipelineResult PipelineRunner::run(int64_t micro_batches, bool training,
                                   const std::function<MicroBatch(int64_t, bool)>& micro, const TensorView& loss_sum) {
    using Clock = std::chrono::steady_clock;
    const auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    const int p = par_.pp_size(), r = par_.coord().pp, v = model_.num_chunks();
    const int64_t last_stage = static_cast<int64_t>(p) * v - 1;
    const int64_t rows = model_.local_rows(), hidden = model_.dims().hidden;
    // Activations and their gradients travel as stored (16-bit on the CPU in 16-bit runs), as 4-byte words.
    const DType stored = model_.stored_dtype();
    const int64_t bytes = rows * hidden * static_cast<int64_t>(dtype_size(stored));
    MWB_CHECK(bytes % 4 == 0, "pipeline: a {} x {} {} activation is not a whole number of 4-byte words", rows, hidden,
              dtype_name(stored));
    const int64_t words = bytes / 4;
    const auto words_of = [](const Buffer& b) { return static_cast<float*>(b.data()); };
    const int next = (r + 1) % p, previous = (r - 1 + p) % p;
    Communicator& pp = par_.pp();
    // Message tags name (micro-batch, virtual stage, direction) so receives match their sends.
    const auto tag = [&](int64_t m, int64_t stage, int direction) {
        const int64_t t = 2 * (m * (last_stage + 1) + stage) + direction;
        MWB_CHECK(t < (int64_t{1} << 30), "pipeline message tag overflow ({} micro-batches)", micro_batches);
        return static_cast<int>(t);
    };
    const auto stage_of = [&](const PipelineAction& a) { return static_cast<int64_t>(a.chunk) * p + r; };

    std::list<InFlight> in_flight;
    // Outputs of the previous step, sent at the next exchange point.
    std::vector<Buffer> out_buffers;
    std::vector<Message> out_messages;
    const auto exchange = [&](std::span<const Message> recvs) {
        if (out_messages.empty() && recvs.empty()) return;
        in_flight.push_back({std::move(out_buffers), pp.exchange(out_messages, recvs)});
        out_buffers.clear();
        out_messages.clear();
    };
    PipelineResult result;
    bool first_loss = true;  // the first micro-batch's loss overwrites loss_sum, the others add to it
    const std::vector<PipelineAction> actions = pipeline_schedule(p, r, v, micro_batches, !training);

    for (std::size_t first = 0; first < actions.size();) {
        std::size_t end = first + 1;
        while (end < actions.size() && actions[end].step == actions[first].step) ++end;
        // The step's inputs (activations from the previous stage, gradients from the next), received
        // together with the previous step's outputs.
        std::vector<Buffer> inputs(end - first);
        std::vector<Message> recvs;
        for (std::size_t i = first; i < end; ++i) {
            const PipelineAction& a = actions[i];
            const int64_t stage = stage_of(a);
            Buffer& in = inputs[i - first];
            if (a.kind == PipelineAction::Kind::Forward && stage > 0) {
                in = Buffer(model_.allocator(), MemCategory::Activations, rows * hidden, stored);
                recvs.push_back({words_of(in), words, previous, tag(a.micro, stage - 1, 0)});
            } else if (a.kind == PipelineAction::Kind::Backward && stage < last_stage) {
                in = Buffer(model_.allocator(), MemCategory::Workspace, rows * hidden, stored);
                recvs.push_back({words_of(in), words, next, tag(a.micro, stage, 1)});
            }
        }
        exchange(recvs);

        for (std::size_t i = first; i < end; ++i) {
            const PipelineAction& a = actions[i];
            const int64_t stage = stage_of(a);
            if (a.kind == PipelineAction::Kind::Forward) {
                MicroBatch mb = micro(a.micro, stage == 0 || stage == last_stage);
                mb.id = a.micro;
                mb.training = training;
                if (stage == last_stage) {
                    mb.loss_sum = loss_sum;
                    mb.accumulate_loss = !first_loss;
                    first_loss = false;
                }
                const auto t0 = Clock::now();
                ForwardResult out = model_.forward(a.chunk, mb, std::move(inputs[i - first]));
                result.forward_seconds += seconds_since(t0);
                if (stage < last_stage) {
                    out_messages.push_back({words_of(out.output), words, next, tag(a.micro, stage, 0)});
                    out_buffers.push_back(std::move(out.output));
                }
            } else {
                const auto t0 = Clock::now();
                Buffer grad_in = model_.backward(a.chunk, a.micro, std::move(inputs[i - first]));
                result.backward_seconds += seconds_since(t0);
                if (stage > 0) {
                    out_messages.push_back({words_of(grad_in), words, previous, tag(a.micro, stage - 1, 1)});
                    out_buffers.push_back(std::move(grad_in));
                }
            }
        }
        first = end;
        // Free buffers of completed sends as we go (they would otherwise pile up over the iteration).
        in_flight.remove_if([](InFlight& f) { return f.sends->done(); });
    }
    exchange({});
    for (InFlight& f : in_flight) f.sends->wait();
    return result;
}

}  // namespace mwb
