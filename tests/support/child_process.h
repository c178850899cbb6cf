#pragma once
// Runs one test function of the current test binary in a fresh child process (posix_spawn of
// /proc/self/exe, so no fork of a process that already holds OpenMP threads). For checks whose failure mode
// is a crash, e.g. an exception thrown inside an OpenMP region ends in std::terminate: the child dies, the
// parent reports it, and the rest of the suite still runs.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

namespace mwb::test {

/// Environment variable set in the child, so the test function knows to run its body instead of spawning.
inline constexpr const char* kChildEnv = "MWB_TEST_IN_CHILD";

inline bool in_child() {
    return std::getenv(kChildEnv) != nullptr;
}

struct ChildResult {
    bool exited = false;  ///< returned from main (else killed by a signal, e.g. SIGABRT from std::terminate)
    int code = -1;        ///< exit status when exited, else the signal number
    std::string describe() const {
        return exited ? "child exited with status " + std::to_string(code)
                      : "child killed by signal " + std::to_string(code) + " (crashed)";
    }
};

/// Set by a test group's main() (support/suite_main.cpp) to the suite it runs, which the child is then
/// told to run too.
inline constexpr const char* kSuiteEnv = "MWB_TEST_SUITE";

/// Runs `<this binary> [suite] -silent -nocrashhandler <function>` with kChildEnv set and waits for it (no
/// crash handler: a crash is the expected failure, not something to attach a debugger to).
inline ChildResult run_test_function_in_child(const std::string& function) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
    env_strings.push_back(std::string(kChildEnv) + "=1");
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe", silent = "-silent", nocrash = "-nocrashhandler", fn = function;
    const char* suite_env = std::getenv(kSuiteEnv);
    std::string suite = suite_env ? suite_env : "";
    std::vector<char*> argv{exe.data()};
    if (!suite.empty()) argv.push_back(suite.data());
    for (std::string* a : {&silent, &nocrash, &fn}) argv.push_back(a->data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    ChildResult r;
    if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) return r;
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return r;
    r.exited = WIFEXITED(status);
    r.code = r.exited ? WEXITSTATUS(status) : WTERMSIG(status);
    return r;
}

}  // namespace mwb::test
