#pragma once
// The cuDNN 9 scaled-dot-product-attention graphs (causal, optional dropout, grouped-query) as data:
// every tensor (uid, dims, strides, type, virtual or passed by value) and every node (matmul,
// pointwise, reduction, rng, reshape with their inputs and outputs), in the order cuDNN's backend API
// receives them (kernels/cuda/cudnn_sdpa.cpp turns each row into descriptors). Written from cuDNN's
// backend documentation and the node sequence of cudnn-frontend's SDPA (not its code); no cuDNN
// header is needed here, so every build unit-tests the plans (tests/kernels/test_attention_backend.cpp).
//
// Layout the graphs read (kernels/cuda/ops_attention_cudnn.cu stages it): bf16 rows n = s·B + b of
// W = (A + 2G)·D elements holding [q_0 … q_{A−1} | k_0 … k_{G−1} | v_0 … v_{G−1}]: Q is (B, A, S, D)
// with strides (W, D, B·W, 1), K and V (B, G, S, D) from offsets A·D and (A + G)·D; O and dO (B, A,
// S, D) in the attention output's layout (S, B, A·D); Stats (B, A, S, 1) f32 = our B·A·S
// log-sum-exps. K enters the first product as Kᵀ (dims 2 and 3 swapped), as cuDNN expects.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mwb::cudnn_sdpa {

enum class Type { BF16, F32, I32, I64, Bool };
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
};

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
