// Qt Test suite over the CUDA op checks (cuda_op_checks.h): one data row per check. Without a usable
// GPU it prints "no CUDA device: <reason>" and exits 77, which ctest reports as skipped.
#include "cuda_op_checks.h"

#include <QtTest>

#include <cstdio>

class TestCudaOps : public QObject {
    Q_OBJECT
private slots:
    void op_matches_cpu_data() {
        QTest::addColumn<QString>("check");
        for (const std::string& name : mwb::test::cuda_check_names())
            QTest::newRow(name.c_str()) << QString::fromStdString(name);
    }
    void op_matches_cpu() {
        QFETCH(QString, check);
        const mwb::test::CudaCheckResult r = mwb::test::run_cuda_check(check.toStdString());
        QVERIFY2(r.passed, qPrintable(QStringLiteral("%1: error %2 > tolerance %3 (%4)")
                                          .arg(check)
                                          .arg(r.error, 0, 'g', 3)
                                          .arg(r.tolerance, 0, 'g', 3)
                                          .arg(QString::fromStdString(r.detail))));
    }
};

int main(int argc, char** argv) {
    const std::string reason = mwb::test::cuda_unavailable_reason();
    if (!reason.empty()) {
        std::printf("no CUDA device: %s\n", reason.c_str());
        return 77;
    }
    QCoreApplication app(argc, argv);
    TestCudaOps t;
    return QTest::qExec(&t, argc, argv);
}

#include "test_cuda_ops.moc"
