// main() of a test group (support/suite.h): argv[1] names the suite, the rest goes to the suite.
#include "support/child_process.h"
#include "support/suite.h"

#include <cstdio>
#include <cstring>
#include <vector>

namespace mwb::test {
namespace {

struct Suite {
    const char* name;
    SuiteMain main;
};

std::vector<Suite>& suites() {
    static std::vector<Suite> all;
    return all;
}

}  // namespace

bool register_suite(const char* name, SuiteMain main) {
    suites().push_back({name, main});
    return true;
}

}  // namespace mwb::test

int main(int argc, char* argv[]) {
    if (argc >= 2)
        for (const auto& s : mwb::test::suites())
            if (std::strcmp(argv[1], s.name) == 0) {
                // A child the suite starts of this executable (support/child_process.h) runs it too.
                setenv(mwb::test::kSuiteEnv, s.name, 1);
                argv[1] = argv[0];  // the suite sees "program [Qt Test options]"
                return s.main(argc - 1, argv + 1);
            }
    std::fprintf(stderr, "usage: %s SUITE [Qt Test options]\n%s SUITE: one of\n", argv[0],
                 argc >= 2 ? "unknown" : "missing");
    for (const auto& s : mwb::test::suites()) std::fprintf(stderr, "  %s\n", s.name);
    return 2;
}
