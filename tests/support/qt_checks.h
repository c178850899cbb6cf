#pragma once
// Qt Test checks that say what failed: the measured error next to its tolerance, or the first element at
// which two float arrays differ bitwise (index, both values and their bit patterns).
#include <QString>
#include <QtTest>

#include <bit>
#include <cstdint>
#include <vector>

namespace mwb::test {

/// Empty when a and b are bitwise identical, else a description of the first difference.
inline QString bitwise_difference(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return QStringLiteral("sizes differ: %1 vs %2").arg(a.size()).arg(b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        const uint32_t x = std::bit_cast<uint32_t>(a[i]), y = std::bit_cast<uint32_t>(b[i]);
        if (x != y)
            return QStringLiteral("element %1: %2 (0x%3) vs %4 (0x%5)")
                .arg(i)
                .arg(double(a[i]), 0, 'g', 9)
                .arg(x, 8, 16, QLatin1Char('0'))
                .arg(double(b[i]), 0, 'g', 9)
                .arg(y, 8, 16, QLatin1Char('0'));
    }
    return {};
}

}  // namespace mwb::test

/// QVERIFY that `err` (an error measure) is below `tol`, printing both on failure. With MWB_PRINT_ERRORS set
/// in the environment every measured error is printed, to see how much room each tolerance leaves.
#define MWB_VERIFY_ERROR(err, tol)                                                                         \
    do {                                                                                                   \
        const double mwb_err_ = (err);                                                                     \
        const QString mwb_msg_ = QStringLiteral("%1 = %2, tolerance %3").arg(#err).arg(mwb_err_).arg(tol); \
        if (qEnvironmentVariableIsSet("MWB_PRINT_ERRORS")) qInfo("%s", qPrintable(mwb_msg_));              \
        QVERIFY2(mwb_err_ < (tol), qPrintable(mwb_msg_));                                                  \
    } while (0)

/// QVERIFY that two std::vector<float> are bitwise identical, printing the first difference.
#define MWB_VERIFY_BITWISE(a, b)                                                                         \
    do {                                                                                                 \
        const QString mwb_diff_ = ::mwb::test::bitwise_difference((a), (b));                             \
        QVERIFY2(mwb_diff_.isEmpty(), qPrintable(QStringLiteral("%1 vs %2: ").arg(#a, #b) + mwb_diff_)); \
    } while (0)
