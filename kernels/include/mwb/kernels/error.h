#pragma once
// The one error type of the project's C++ libraries, and the check macro that raises it.
// Engine code fails loudly with the location and a hint; library edges catch mwb::Error and report
// the message, which always names the field, file or tensor involved.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace mwb {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

[[noreturn]] void fail_at(const char* file, int line, const std::string& message);

}  // namespace mwb

#define MWB_CHECK(cond, ...)                                                     \
    do {                                                                         \
        if (!(cond)) [[unlikely]]                                                \
            ::mwb::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__));      \
    } while (0)

#define MWB_FAIL(...) ::mwb::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
