// The key of cuBLASLt's plan cache (kernels/cuda/gemm_lt_key.h), which needs no GPU: every field that
// changes the descriptors, layouts or algorithm makes a different key, equal calls the same key (one
// plan), and alignments are what the heuristic is told.
#include "gemm_lt_key.h"

#include "support/suite.h"

#include <QtTest>

#include <functional>
#include <unordered_set>
#include <vector>

namespace test_kernels_gemm_lt_key {

using namespace mwb::cuda;

namespace {

LtKey base() {
    LtKey k;
    k.m = 3072;
    k.n = 8192;
    k.k = 768;
    k.trans_a = true;
    k.type_a = k.type_b = 14;    // CUDA_R_16BF
    k.type_d = k.type_bias = 0;  // CUDA_R_32F
    k.compute = 68;              // CUBLAS_COMPUTE_32F
    k.epilogue = LtEpilogue::GeluAuxBias;
    k.align_a = k.align_b = k.align_d = k.align_bias = 256;
    return k;
}

}  // namespace

class TestGemmLtKey : public QObject {
    Q_OBJECT
private slots:
    void alignment_is_the_largest_power_of_two_up_to_256() {
        QCOMPARE(lt_alignment(0), 256u);
        QCOMPARE(lt_alignment(256 * 7), 256u);
        QCOMPARE(lt_alignment(4096 + 128), 128u);
        QCOMPARE(lt_alignment(64 * 3), 64u);
        QCOMPARE(lt_alignment(4 * 5), 4u);
        QCOMPARE(lt_alignment(2), 2u);
        QCOMPARE(lt_alignment(1001), 1u);
        // A parameter at an arena offset of 64 floats (kArenaAlignment) from a 256-byte aligned base.
        QCOMPARE(lt_alignment(0x7f0000000000u + 64 * 4 * 13), 256u);
        // ... and one at 16 floats, as before the padding grew: 64 bytes, too little for some kernels.
        QCOMPARE(lt_alignment(0x7f0000000000u + 16 * 4 * 13), 64u);
    }

    void every_field_makes_its_own_key() {
        const std::vector<std::function<void(LtKey&)>> changes = {
            [](LtKey& k) { k.m += 1; },
            [](LtKey& k) { k.n += 1; },
            [](LtKey& k) { k.k += 1; },
            [](LtKey& k) { k.trans_a = !k.trans_a; },
            [](LtKey& k) { k.trans_b = !k.trans_b; },
            [](LtKey& k) { k.type_a = 2; },
            [](LtKey& k) { k.type_b = 2; },
            [](LtKey& k) { k.type_d = 14; },
            [](LtKey& k) { k.type_bias = 14; },
            [](LtKey& k) { k.compute = 77; },
            [](LtKey& k) { k.epilogue = LtEpilogue::Bias; },
            [](LtKey& k) { k.align_a = 16; },
            [](LtKey& k) { k.align_b = 16; },
            [](LtKey& k) { k.align_d = 16; },
            [](LtKey& k) { k.align_bias = 16; },
        };
        std::unordered_set<LtKey, LtKeyHash> keys{base()};
        for (const auto& change : changes) {
            LtKey k = base();
            change(k);
            QVERIFY(!(k == base()));
            QVERIFY(keys.insert(k).second);  // distinct from the base and from every other change
        }
        QCOMPARE(keys.size(), changes.size() + 1);
        // The same call again finds the same key (the cached plan), hash included.
        QVERIFY(base() == base());
        QCOMPARE(LtKeyHash{}(base()), LtKeyHash{}(base()));
        QVERIFY(!keys.insert(base()).second);
    }

    void the_shapes_of_a_training_step_hash_apart() {
        // GPT-2 124M's GEMMs of one layer at N = 8192 rows (m, n, k; both epilogue kinds): no collisions.
        std::unordered_set<std::size_t> hashes;
        int count = 0;
        for (int64_t m : {768, 2304, 3072})
            for (int64_t n : {768, 2304, 3072, 8192})
                for (int64_t k : {768, 3072, 8192})
                    for (LtEpilogue e : {LtEpilogue::Bias, LtEpilogue::BGradB, LtEpilogue::DGeluBGrad}) {
                        LtKey key = base();
                        key.m = m;
                        key.n = n;
                        key.k = k;
                        key.epilogue = e;
                        hashes.insert(LtKeyHash{}(key));
                        ++count;
                    }
        QCOMPARE(static_cast<int>(hashes.size()), count);
    }

    void epilogue_operands() {
        QVERIFY(lt_reads_bias(LtEpilogue::Bias) && lt_reads_bias(LtEpilogue::GeluAuxBias));
        QVERIFY(!lt_reads_bias(LtEpilogue::GeluAux) && !lt_reads_bias(LtEpilogue::BGradB));
        QVERIFY(lt_writes_bias_gradient(LtEpilogue::DGeluBGrad) && lt_writes_bias_gradient(LtEpilogue::BGradB));
        QVERIFY(!lt_writes_bias_gradient(LtEpilogue::DGelu) && !lt_writes_bias_gradient(LtEpilogue::Bias));
        for (LtEpilogue e : {LtEpilogue::GeluAux, LtEpilogue::GeluAuxBias, LtEpilogue::DGelu, LtEpilogue::DGeluBGrad})
            QVERIFY(lt_uses_aux(e));
        for (LtEpilogue e : {LtEpilogue::Default, LtEpilogue::Bias, LtEpilogue::BGradB}) QVERIFY(!lt_uses_aux(e));
    }

    void bias_gradients_are_fp32_beside_any_output() {
        constexpr int f16 = 2, bf16 = 14;  // CUDA_R_16F, CUDA_R_16BF
        // A bias the epilogue reads has D's type; a bias gradient it writes is fp32 (scratch), also beside
        // the f16 D of an f16 gradient arena's weight gradient.
        QCOMPARE(lt_bias_type(LtEpilogue::Bias, bf16), bf16);
        QCOMPARE(lt_bias_type(LtEpilogue::GeluAuxBias, f16), f16);
        QCOMPARE(lt_bias_type(LtEpilogue::BGradB, f16), kLtTypeF32);
        QCOMPARE(lt_bias_type(LtEpilogue::DGeluBGrad, bf16), kLtTypeF32);
        QCOMPARE(lt_bias_type(LtEpilogue::BGradB, kLtTypeF32), kLtTypeF32);
        // An f16 D is its own plan beside an f32 D of the same shape and epilogue (C's dtype is in the key).
        LtKey a = base(), b = base();
        a.epilogue = b.epilogue = LtEpilogue::BGradB;
        b.type_d = f16;
        a.type_bias = lt_bias_type(a.epilogue, a.type_d);
        b.type_bias = lt_bias_type(b.epilogue, b.type_d);
        QCOMPARE(a.type_bias, b.type_bias);
        QVERIFY(!(a == b));
        QVERIFY(LtKeyHash{}(a) != LtKeyHash{}(b));
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_gemm_lt_key, TestGemmLtKey)
}  // namespace test_kernels_gemm_lt_key
#include "test_gemm_lt_key.moc"
