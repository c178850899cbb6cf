#pragma once
// ctest tells a skipped check from a passed one. Qt Test exits 0 when a function calls QSKIP, so ctest
// would count a suite that could not run its check as passed; suites that can skip use MWB_SKIP instead
// of QSKIP and one of the MWB_TEST_*MAIN macros instead of QTEST_*MAIN (a standalone executable) or
// support/suite.h's MWB_TEST_SUITE_* (a suite of a test group): when nothing failed but something was
// skipped, the suite exits 77, which mwb_add_test declares as SKIP_RETURN_CODE.
#include <QtTest>

#include <cstdio>

namespace mwb::test {

inline int& skipped_checks() {
    static int count = 0;
    return count;
}

/// qExec's result (the number of failed functions) -> the exit status ctest reads.
inline int exit_status(int failures) {
    if (failures != 0) return failures;
    if (skipped_checks() == 0) return 0;
    std::fprintf(stderr, "%d check(s) skipped (see SKIP above): exit 77, ctest reports this suite as skipped\n",
                 skipped_checks());
    return 77;
}

}  // namespace mwb::test

#define MWB_SKIP(why)                    \
    do {                                 \
        ++::mwb::test::skipped_checks(); \
        QSKIP(why);                      \
    } while (false)

#define MWB_TEST_MAIN_WITH(TestObject, ...)                             \
    int main(int argc, char* argv[]) {                                  \
        __VA_ARGS__                                                     \
        TestObject tc;                                                  \
        QTEST_SET_MAIN_SOURCE_PATH                                      \
        return ::mwb::test::exit_status(QTest::qExec(&tc, argc, argv)); \
    }
#define MWB_TEST_APPLESS_MAIN(TestObject) MWB_TEST_MAIN_WITH(TestObject)
#define MWB_TEST_GUILESS_MAIN(TestObject) \
    MWB_TEST_MAIN_WITH(TestObject, QCoreApplication app(argc, argv); app.setAttribute(Qt::AA_Use96Dpi, true);)
#define MWB_TEST_MAIN(TestObject) \
    MWB_TEST_MAIN_WITH(TestObject, QApplication app(argc, argv); app.setAttribute(Qt::AA_Use96Dpi, true);)
