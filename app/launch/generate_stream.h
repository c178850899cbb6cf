#pragma once
// Reading `mwb-generate --json` (SAMPLES_CONTRACT.md): one JSON object per line on stdout — start,
// token, done, error. Bytes arrive in any chunks; complete lines are checked (size, JSON, the fields
// each type needs) and turned into events; anything else becomes an error event naming what was wrong.
// Qt-free, so the dialog's reading is tested without a window.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mwb::app {

struct GenerateEvent {
    enum class Type { Start, Token, Done, Error };
    Type type = Type::Error;
    int64_t prompt_index = 0;
    int64_t token = -1;             ///< Token
    std::string text;               ///< Token: the piece (may be empty); Done: the completion; Error: the message
    int64_t completion_tokens = 0;  ///< Done
    std::string finish_reason;      ///< Done: eos or length
    double tokens_per_sec = 0;      ///< Done
    int64_t prompts = 0;            ///< Start
};

class GenerateStream {
public:
    /// A line longer than this is refused (a token's piece or a completion is far smaller).
    static constexpr std::size_t kMaxLineBytes = std::size_t{4} << 20;

    /// Feeds bytes read from stdout; returns the events of the lines they completed.
    std::vector<GenerateEvent> feed(std::string_view bytes);
    /// The events of a last line without its newline (at the process's exit).
    std::vector<GenerateEvent> finish();

private:
    std::vector<GenerateEvent> line(std::string_view text);
    std::string pending_;
    bool skipping_ = false;  // inside a line that was too long
};

}  // namespace mwb::app
