#pragma once
// Tensor- and sequence-parallel communication of one layer, as conjugate pairs (Megatron-LM's
// mappings), called explicitly in forward and backward:
//   before a column-parallel linear:  forward gather_rows (SP: all-gather along s; else identity)
//                                     backward reduce_rows (SP: reduce-scatter; else all-reduce)
//   after a row-parallel linear:      forward reduce_rows, backward gather_rows
// Rows are the S·B rows of (S, B, H) activations: under sequence parallelism a rank holds the
// contiguous block of S/t positions [s_begin, s_begin + S/t), i.e. rows [s_begin·B, (s_begin + S/t)·B).
#include "mwb/kernels/ops.h"
#include "mwb/kernels/tensor.h"
#include "backend/parallel/communicator.h"

#include <cstdint>

namespace mwb {

class TensorParallel {
public:
    /// tp: the tensor-parallel group for the model's tensors (NCCL on GPUs, MPI on CPUs); sp: the same
    /// ranks, for sequence-parallel traffic. Copies between a rank's own buffers run on `ctx` (device
    /// copies on a GPU).
    TensorParallel(Communicator& tp, Communicator& sp, bool sequence_parallel, OpContext& ctx)
        : tp_(tp), sp_(sp), sequence_parallel_(sequence_parallel && tp.size() > 1), ctx_(ctx) {}

    int size() const { return tp_.size(); }
    int rank() const { return tp_.rank(); }
    bool sequence_parallel() const { return sequence_parallel_; }
    Communicator& group() { return tp_; }
    /// Sequence positions this rank holds in the residual stream (all of them without SP).
    int64_t local_seq(int64_t seq) const { return sequence_parallel_ ? seq / size() : seq; }
    int64_t seq_begin(int64_t seq) const { return sequence_parallel_ ? rank() * (seq / size()) : 0; }

    /// full (N, H) partial sums of every rank -> local rows of the sum (N/t rows under SP, else N,
    /// in place). `local` may alias `full` only without SP. With more than one rank `full` is f32 (sums
    /// round once, after the reduction), and so is `local` under SP; otherwise `local` may be 16-bit
    /// (the copy rounds).
    void reduce_rows(const TensorView& full, const TensorView& local);
    /// local rows -> full (N, H) rows of the same dtype (SP: all-gather; else a copy unless they alias).
    void gather_rows(const TensorView& local, const TensorView& full);
    /// Sum (max) over the tensor-parallel ranks, in place, of an F32 tensor on the model's device (the
    /// vocabulary-parallel loss statistics): no host copy on a GPU.
    void all_reduce_sum(const TensorView& x) { tp_.all_reduce_sum(x.f32(), x.numel()); }
    void all_reduce_max(const TensorView& x) { tp_.all_reduce_max(x.f32(), x.numel()); }

private:
    Communicator& tp_;
    Communicator& sp_;
    bool sequence_parallel_;
    OpContext& ctx_;

    void copy(const TensorView& dst, const TensorView& src);
};

}  // namespace mwb
