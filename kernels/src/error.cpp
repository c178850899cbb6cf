#include "mwb/kernels/error.h"

namespace mwb {

void fail_at(const char* file, int line, const std::string& message) {
    throw Error(message, fmt::format("{}:{}", file, line));
}

}  // namespace mwb
