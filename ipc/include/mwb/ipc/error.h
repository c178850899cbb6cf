#pragma once
// The one error type of ipc/. Its message names the endpoint, file or field involved and what was
// expected, e.g. "control endpoint tcp://0.0.0.0:5555: plaintext is refused off loopback; ...".
// ipc/ does not depend on the engine, so this is not mwb::Error; callers map it (mwb-train turns it
// into a configuration error).
#include <stdexcept>
#include <string>

namespace mwb::ipc {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace mwb::ipc
