// The attention backend choice and cuDNN's graphs as far as they go without a GPU:
//   - resolve_attention_backend on this machine: without a usable GPU, auto and cudnn resolve to the
//     own kernels with the reason; own and deterministic runs always do;
//   - the forward and backward SDPA plans (kernels/src/cudnn_sdpa_plan.h) for multi-head, grouped-
//     query and multi-query attention, with and without dropout: consistent (check), and every bound
//     tensor's dims and strides address exactly the elements of the packed qkv, the output and the
//     log-sum-exps the op binds in place (bf16 and fp16 graphs).
// What cuDNN itself says of the descriptors: test_kernels_cudnn_descriptors (CUDA builds with the
// library). Whether the graphs run and match the CPU op: mwb-gpu-check attention_cudnn (a GPU).
#include "mwb/kernels/attention_backend.h"
#include "mwb/kernels/device.h"

#include "cudnn_sdpa_plan.h"

#include "support/suite.h"

#include <QtTest>

#include <set>

namespace test_kernels_attention_backend {

using namespace mwb;
namespace sdpa = mwb::cudnn_sdpa;

namespace {

/// The element offsets a bound tensor addresses (from its pointer), every index of its dims.
std::set<int64_t> addressed(const sdpa::Tensor& t) {
    std::set<int64_t> out;
    for (int64_t a = 0; a < t.dims[0]; ++a)
        for (int64_t b = 0; b < t.dims[1]; ++b)
            for (int64_t c = 0; c < t.dims[2]; ++c)
                for (int64_t d = 0; d < t.dims[3]; ++d)
                    out.insert(a * t.strides[0] + b * t.strides[1] + c * t.strides[2] + d * t.strides[3]);
    return out;
}

int count(const sdpa::Plan& p, sdpa::Op op, sdpa::Mode mode = sdpa::Mode::None) {
    int n = 0;
    for (const sdpa::Node& node : p.nodes) n += node.op == op && (mode == sdpa::Mode::None || node.mode == mode);
    return n;
}

}  // namespace

class TestAttentionBackend : public QObject {
    Q_OBJECT

private slots:
    void without_a_gpu_auto_resolves_to_the_own_kernels_with_the_reason() {
        const DeviceReport r = probe_devices();
        if (r.cuda_devices > 0) QSKIP("a GPU is present: the fallback to the own kernels is not what runs here");
        for (const char* asked : {"auto", "cudnn"}) {
            const AttentionBackendChoice c = resolve_attention_backend(asked, false, true);
            QCOMPARE(c.backend, AttentionBackend::Own);
            qInfo("%s -> %s", asked, c.reason.c_str());
            QVERIFY2(c.reason.starts_with(std::string(asked) + ": the own kernels ("), c.reason.c_str());
            // The reason names what is missing: the device (CUDA builds) or the CUDA build itself.
            QVERIFY2(c.reason.find("no CUDA device") != std::string::npos ||
                         c.reason.find("no CUDA support") != std::string::npos,
                     c.reason.c_str());
        }
    }

    void own_fp32_and_deterministic_runs_keep_the_own_kernels() {
        QCOMPARE(resolve_attention_backend("own", false, true).backend, AttentionBackend::Own);
        const AttentionBackendChoice det = resolve_attention_backend("auto", true, true);
        QCOMPARE(det.backend, AttentionBackend::Own);
#if defined(MWB_WITH_CUDA)
        QVERIFY2(det.reason.find("deterministic") != std::string::npos, det.reason.c_str());
        const AttentionBackendChoice fp32 = resolve_attention_backend("cudnn", false, false);
        QCOMPARE(fp32.backend, AttentionBackend::Own);
        QVERIFY2(fp32.reason.find("fp32") != std::string::npos, fp32.reason.c_str());
#endif
        QCOMPARE(std::string(attention_backend_name(AttentionBackend::Cudnn)), std::string("cudnn"));
        QCOMPARE(std::string(attention_backend_name(AttentionBackend::Own)), std::string("own"));
    }

    void plans_are_consistent_and_bind_the_packed_layout_in_place() {
        struct Case {
            int64_t B, A, G, S, D;
            float dropout;
        };
        for (const Case c : {Case{2, 4, 4, 33, 64, 0.0f}, Case{1, 8, 2, 17, 128, 0.1f}, Case{2, 4, 1, 9, 64, 0.0f},
                             Case{1, 6, 3, 5, 16, 0.2f}}) {
            const sdpa::Shape s{c.B, c.A, c.G, c.S, c.D, 0.125f, c.dropout};
            const QString tag = QString("B %1 A %2 G %3 S %4 D %5 dropout %6")
                                    .arg(c.B).arg(c.A).arg(c.G).arg(c.S).arg(c.D).arg(static_cast<double>(c.dropout));
            const sdpa::Plan fwd = sdpa::forward_plan(s), bwd = sdpa::backward_plan(s);
            QVERIFY2(sdpa::check(fwd).empty(), qPrintable(tag + ": forward: " + QString::fromStdString(sdpa::check(fwd))));
            QVERIFY2(sdpa::check(bwd).empty(), qPrintable(tag + ": backward: " + QString::fromStdString(sdpa::check(bwd))));

            // The packed grouped qkv in place: rows s·B + b of W = (A + 2G)·D, group g's n = A/G query
            // heads at columns g·(n + 2)·D + [0, n·D); its K at g·(n + 2)·D + n·D + [0, D) and V one head
            // further (K's and V's addresses are relative to their binding offsets); dQ, dK, dV the same.
            const int64_t W = (c.A + 2 * c.G) * c.D, rows = c.S * c.B, n = c.A / c.G;
            std::set<int64_t> q, kv;
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t g = 0; g < c.G; ++g) {
                    for (int64_t e = 0; e < n * c.D; ++e) q.insert(r * W + g * (n + 2) * c.D + e);
                    for (int64_t e = 0; e < c.D; ++e) kv.insert(r * W + g * (n + 2) * c.D + e);
                }
            QCOMPARE(sdpa::k_offset(s), n * c.D);
            QCOMPARE(sdpa::v_offset(s), (n + 1) * c.D);
            for (const sdpa::Plan* p : {&fwd, &bwd}) {
                QCOMPARE(addressed(*p->find(sdpa::kQ)), q);
                QCOMPARE(addressed(*p->find(sdpa::kK)), kv);
                QCOMPARE(addressed(*p->find(sdpa::kV)), kv);
                // O (S, B, A·D) and the B·A·S log-sum-exps, each element once.
                std::set<int64_t> o, stats;
                for (int64_t e = 0; e < rows * c.A * c.D; ++e) o.insert(e);
                for (int64_t e = 0; e < c.B * c.A * c.S; ++e) stats.insert(e);
                QCOMPARE(addressed(*p->find(sdpa::kO)), o);
                QCOMPARE(addressed(*p->find(sdpa::kStats)), stats);
                // Element (b·G + g, j, s, d) of Q sits at row s·B + b, column (g·(n + 2) + j)·D + d.
                const sdpa::Tensor& qt = *p->find(sdpa::kQ);
                QCOMPARE(qt.dims[0], c.B * c.G);
                QCOMPARE(qt.dims[1], n);
                const int64_t j = n - 1;
                QCOMPARE(1 * qt.strides[0] + j * qt.strides[1] + 3 * qt.strides[2] + 5 * qt.strides[3],
                         3 * c.B * W + (1 / c.G) * W + ((1 % c.G) * (n + 2) + j) * c.D + 5);
                // K enters as Kᵀ: dims (B·G, 1, D, S).
                QCOMPARE(p->find(sdpa::kK)->dims[2], c.D);
                QCOMPARE(p->find(sdpa::kK)->dims[3], c.S);
                QCOMPARE(p->find(sdpa::kSeed) != nullptr, c.dropout > 0);
                QCOMPARE(count(*p, sdpa::Op::Rng), c.dropout > 0 ? 1 : 0);
                QCOMPARE(count(*p, sdpa::Op::Pointwise, sdpa::Mode::CmpGe), 1);  // one causal mask
            }
            QCOMPARE(addressed(*bwd.find(sdpa::kDQ)), q);
            QCOMPARE(addressed(*bwd.find(sdpa::kDK)), kv);
            QCOMPARE(addressed(*bwd.find(sdpa::kDV)), kv);
            // Grouped: dK and dV sum each group's query heads (two reductions more than multi-head).
            QCOMPARE(count(bwd, sdpa::Op::Reduction), c.G == c.A ? 1 : 3);
            QCOMPARE(count(fwd, sdpa::Op::Matmul), 2);
            QCOMPARE(count(bwd, sdpa::Op::Matmul), 5);  // S, dP, dV, dK, dQ: FlashAttention-2's five products
            QCOMPARE(bwd.find(sdpa::kDQAccum)->type, sdpa::Type::F32);  // dQ accumulates in f32
            // fp16 graphs: the same plan with every 16-bit tensor f16.
            sdpa::Shape s16 = s;
            s16.io = sdpa::Type::F16;
            const sdpa::Plan fwd16 = sdpa::forward_plan(s16), bwd16 = sdpa::backward_plan(s16);
            QVERIFY(sdpa::check(fwd16).empty() && sdpa::check(bwd16).empty());
            for (const int64_t uid : {sdpa::kQ, sdpa::kK, sdpa::kV, sdpa::kO}) QCOMPARE(fwd16.find(uid)->type, sdpa::Type::F16);
            for (const int64_t uid : {sdpa::kDO, sdpa::kDQ, sdpa::kDK, sdpa::kDV}) QCOMPARE(bwd16.find(uid)->type, sdpa::Type::F16);
            QCOMPARE(bwd16.find(sdpa::kStats)->type, sdpa::Type::F32);
        }
    }

    void check_names_what_is_wrong() {
        // The consistency check can fail: a virtual tensor read before it is produced, a dangling uid.
        sdpa::Plan p = sdpa::forward_plan({1, 2, 2, 4, 16, 0.25f, 0.0f});
        std::swap(p.nodes[0], p.nodes[1]);
        QVERIFY(sdpa::check(p).find("before it is produced") != std::string::npos);
        p = sdpa::forward_plan({1, 2, 2, 4, 16, 0.25f, 0.0f});
        p.nodes.back().b = 999;
        QVERIFY(sdpa::check(p).find("unknown tensor uid 999") != std::string::npos);
    }
};

MWB_TEST_SUITE_GUILESS(test_kernels_attention_backend, TestAttentionBackend)
}  // namespace test_kernels_attention_backend
#include "test_attention_backend.moc"
