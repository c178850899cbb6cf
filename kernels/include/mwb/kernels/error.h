#pragma once
// The one error type of the project's C++ libraries, and the check macro that raises it.
// Engine code fails loudly with the location and a hint; library edges catch mwb::Error and report
// the message, which always names the field, file or tensor involved.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace mwb {

/// what() is the message for the user (it names the field, file or tensor); where() is the source
/// location that raised it, for bug reports.
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message, std::string where = {})
        : std::runtime_error(message), where_(std::move(where)) {}
    const std::string& where() const { return where_; }

private:
    std::string where_;
};

[[noreturn]] void fail_at(const char* file, int line, const std::string& message);

}  // namespace mwb

#define MWB_CHECK(cond, ...)                                                     \
    do {                                                                         \
        if (!(cond)) [[unlikely]]                                                \
            ::mwb::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__));      \
    } while (0)

#define MWB_FAIL(...) ::mwb::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
