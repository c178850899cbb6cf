#pragma once
// Sending control requests to a run (the app's buttons, `mwb-record control`, scripts): one request
// at a time over a DEALER socket, the reply matched by id. The trainer answers at its next iteration
// boundary, so a reply can take as long as one iteration.
#include "mwb/ipc/curve.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace mwb::ipc {

struct ControlClientOptions {
    std::string endpoint;              ///< the run's control endpoint
    std::string token;                 ///< plaintext runs: the run's control token
    std::optional<ClientCurve> curve;  ///< CURVE runs (required off loopback)
};

class ControlClient {
public:
    explicit ControlClient(ControlClientOptions options);
    /// The control endpoint and token of a run directory on this machine (telemetry.json,
    /// control.token); `curve` for runs that use CURVE.
    static ControlClient for_run_dir(const std::filesystem::path& run_dir, std::optional<ClientCurve> curve = {});
    ~ControlClient();
    ControlClient(ControlClient&&) noexcept;
    ControlClient& operator=(ControlClient&&) noexcept;

    /// Sends `action` (pause, resume, checkpoint, stop, status) and waits for the reply: the
    /// trainer's result with "ok" (and "error" when false). Throws Error on timeout.
    nlohmann::json request(const std::string& action, std::chrono::milliseconds timeout = std::chrono::seconds(60),
                           std::string id = {});
    /// Sends raw bytes as a request body (tests: malformed input). Returns the reply text, if any.
    std::optional<std::string> request_raw(const std::string& body, std::chrono::milliseconds timeout);

    const std::string& endpoint() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace mwb::ipc
