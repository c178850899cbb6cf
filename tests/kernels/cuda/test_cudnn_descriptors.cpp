// cuDNN's own verdict on the SDPA graphs' descriptors, without a GPU: the library (libcudnn.so.9, or
// MWB_CUDNN_LIBRARY) is loaded as the engine loads it, and every tensor, mode and operation descriptor
// of the forward and backward plans is built and finalized (kernels/cuda/cudnn_sdpa.cpp). That checks
// attribute names, types and values against the real backend API; the operation graph, the engine
// choice and the numbers need a GPU (mwb-gpu-check attention_cudnn). Exit 77 when the library cannot
// be loaded here.
#include "cudnn_sdpa.h"

#include <QtTest>

#include <cstdio>

namespace sdpa = mwb::cudnn_sdpa;

class TestCudnnDescriptors : public QObject {
    Q_OBJECT
private slots:
    void every_descriptor_of_the_plans_finalizes() {
        qInfo("cuDNN %lld", static_cast<long long>(mwb::cuda::cudnn::version()));
        // bf16 and fp16 graphs over the packed qkv in place (strided views: batch B·G with stride
        // (A/G + 2)·D inside the sequence stride), multi-head, grouped-query and multi-query.
        const sdpa::Type bf16 = sdpa::Type::BF16, f16 = sdpa::Type::F16;
        for (const sdpa::Shape s :
             {sdpa::Shape{2, 4, 4, 33, 64, 0.125f, 0.0f, bf16}, sdpa::Shape{1, 8, 2, 17, 128, 0.088f, 0.1f, bf16},
              sdpa::Shape{2, 4, 1, 9, 64, 0.125f, 0.0f, bf16}, sdpa::Shape{2, 4, 4, 33, 64, 0.125f, 0.0f, f16},
              sdpa::Shape{1, 8, 2, 17, 128, 0.088f, 0.1f, f16}, sdpa::Shape{2, 4, 1, 9, 64, 0.125f, 0.0f, f16}}) {
            const std::string f = mwb::cuda::cudnn::finalize_nodes(sdpa::forward_plan(s));
            QVERIFY2(f.empty(), f.c_str());
            const std::string b = mwb::cuda::cudnn::finalize_nodes(sdpa::backward_plan(s));
            QVERIFY2(b.empty(), b.c_str());
        }
    }
};

int main(int argc, char** argv) {
    if (const std::string& why = mwb::cuda::cudnn::load_error(); !why.empty()) {
        std::printf("skipped: %s\n", why.c_str());
        return 77;
    }
    QCoreApplication app(argc, argv);
    TestCudnnDescriptors t;
    return QTest::qExec(&t, argc, argv);
}

#include "test_cudnn_descriptors.moc"
