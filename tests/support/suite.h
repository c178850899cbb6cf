#pragma once
// Many Qt Test suites in one executable (tests/CMakeLists.txt, "Test groups"). A grouped test file ends
// with one of the MWB_TEST_SUITE* macros instead of QTEST_*MAIN / MWB_TEST_*MAIN: the macro registers
// the suite under its ctest name, and the group's main() (support/suite_main.cpp) runs the suite its first
// argument names, passing the rest to QTest::qExec:
//     build/tests/ipc/mwb_tests_ipc test_ipc_schema [-v2 | -functions | a function name ...]
// The application object is the one the replaced macro made (none, QCoreApplication, QApplication), and
// the exit status is support/skip.h's (77 when something was skipped and nothing failed). A file keeps
// its own main() as a static function of the same signature and registers it with MWB_TEST_SUITE_MAIN.
#include "support/skip.h"

#include <QtTest>

namespace mwb::test {

using SuiteMain = int (*)(int argc, char* argv[]);
/// Adds a suite to this executable's list (support/suite_main.cpp); returns true.
bool register_suite(const char* name, SuiteMain main);

}  // namespace mwb::test

#define MWB_TEST_SUITE_MAIN(name, function) \
    [[maybe_unused]] static const bool mwb_suite_registered_##name = ::mwb::test::register_suite(#name, &function);

#define MWB_TEST_SUITE_WITH(name, TestObject, ...)                         \
    static int mwb_suite_main_##name(int argc, char* argv[]) {             \
        QT_PREPEND_NAMESPACE(QTest::Internal::callInitMain)<TestObject>(); \
        __VA_ARGS__                                                        \
        TestObject tc;                                                     \
        QTEST_SET_MAIN_SOURCE_PATH                                         \
        return ::mwb::test::exit_status(QTest::qExec(&tc, argc, argv));    \
    }                                                                      \
    MWB_TEST_SUITE_MAIN(name, mwb_suite_main_##name)
/// QTEST_APPLESS_MAIN's: no application object.
#define MWB_TEST_SUITE_APPLESS(name, TestObject) MWB_TEST_SUITE_WITH(name, TestObject)
/// QTEST_GUILESS_MAIN's: a QCoreApplication.
#define MWB_TEST_SUITE_GUILESS(name, TestObject) \
    MWB_TEST_SUITE_WITH(name, TestObject, QCoreApplication app(argc, argv); app.setAttribute(Qt::AA_Use96Dpi, true);)
/// QTEST_MAIN's with Qt Widgets linked: a QApplication.
#define MWB_TEST_SUITE_WIDGETS(name, TestObject) \
    MWB_TEST_SUITE_WITH(name, TestObject, QApplication app(argc, argv); app.setAttribute(Qt::AA_Use96Dpi, true);)
