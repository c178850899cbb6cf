#pragma once
// The cuDNN 9 scaled-dot-product-attention graphs (causal, optional dropout, grouped-query) as data:
// every tensor (uid, dims, strides, type, virtual or passed by value) and every node (matmul,
// pointwise, reduction, rng, reshape with their inputs and outputs), in the order cuDNN's backend API
// receives them (kernels/cuda/cudnn_sdpa.cpp turns each row into descriptors). Written from cuDNN's
// backend documentation and the node sequence of cudnn-frontend's SDPA (not its code); no cuDNN
// header is needed here, so every build unit-tests the plans (tests/kernels/test_attention_backend.cpp).
//
// Layout the graphs read: our tensors in place. qkv (S, B, G·(A/G + 2)·D) holds per row n = s·B + b
// and group g [q_g0 … q_g(n−1) | k_g | v_g] (n = A/G); seen as B·G sequences of n query heads sharing
// one key/value head, Q is (B·G, n, S, D) with strides ((n + 2)·D, D, B·W, 1) (W = (A + 2G)·D), K and V
// (B·G, 1, S, D) with the same strides from offsets n·D and (n + 1)·D, for every G (multi-head: n = 1;
// multi-query: G = 1). O and dO (B·G, n, S, D) in the attention output's layout (S, B, A·D); Stats
// (B·G, n, S, 1) f32 = our B·A·S log-sum-exps; dQ, dK, dV as Q, K, V in dqkv. K enters the first
// product as Kᵀ (dims 2 and 3 swapped), as cuDNN expects. Q/K/V/O/dO/dQ/dK/dV are bf16 or fp16 (io).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mwb::cudnn_sdpa {

enum class Type { BF16, F16, F32, I32, I64, Bool };
enum class Op { Matmul, Pointwise, Reduction, Rng, Reshape };
enum class Mode { None, Mul, Add, Sub, Div, Exp, Log, Identity, GenIndex, CmpGe, BinarySelect, Max, Sum, Bernoulli };

/// The graph's bound tensors (the caller passes a pointer per uid); virtual tensors get uids from
/// kFirstVirtual, scalars passed by value from kFirstScalar.
enum Uid : int64_t {
    kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSoftmaxSum, kDQAccum, kSeed, kOffset,
    kFirstScalar = 50,
    kFirstVirtual = 100,
};

struct Tensor {
    int64_t uid = 0;
    std::string name;
    std::array<int64_t, 4> dims{}, strides{};
    Type type = Type::F32;
    bool is_virtual = false;
    bool by_value = false;  // a host scalar given through the variant pack
    float value = 0;        // its value (F32 scalars)
};

struct Node {
    std::string name;
    Op op = Op::Pointwise;
    Mode mode = Mode::None;
    int64_t x = 0, b = 0, t = 0, y = 0;  // uids: inputs x (matmul A), b (matmul B), t (select's condition); output y
    int64_t axis = -1;                   // GenIndex
    Type compute = Type::F32;
    double probability = 0;              // Bernoulli: probability of keeping an element
};

struct Shape {
    int64_t B = 1, A = 1, G = 1, S = 1, D = 1;
    float scale = 1;
    float dropout = 0;
    Type io = Type::BF16;  ///< the 16-bit type of Q, K, V, O and their gradients (BF16 or F16)
};

/// The bound views of the layout above (also what the kernels' callers compute pointers from): Q's
/// (kv = false) or K's and V's dims, their strides, O's dims and strides, Stats' strides, and the
/// element offsets of K and V from Q in a qkv row.
std::array<int64_t, 4> qkv_dims(const Shape& s, bool kv);
std::array<int64_t, 4> qkv_strides(const Shape& s);
std::array<int64_t, 4> out_dims(const Shape& s);
std::array<int64_t, 4> out_strides(const Shape& s);
std::array<int64_t, 4> stats_strides(const Shape& s);
int64_t k_offset(const Shape& s);
int64_t v_offset(const Shape& s);

struct Plan {
    std::vector<Tensor> tensors;
    std::vector<Node> nodes;
    const Tensor* find(int64_t uid) const;
};

/// O and Stats from Q, K, V (and Seed, Offset with dropout).
Plan forward_plan(const Shape& s);
/// dQ, dK, dV from Q, K, V, O, dO, Stats (and Seed, Offset with dropout); SoftmaxSum (B, A, S, 1) f32
/// and DQAccum (B, A, S, D) f32 are scratch the caller provides.
Plan backward_plan(const Shape& s);

/// Empty when the plan is consistent (every uid defined once, every node's inputs defined before it,
/// every virtual tensor produced once and read, element-wise shapes broadcastable, matmul dims
/// agreeing, every bound uid present); else what is wrong.
std::string check(const Plan& p);

}  // namespace mwb::cudnn_sdpa
