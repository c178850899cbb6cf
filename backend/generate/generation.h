#pragma once
// A batch of prompts through the decoder: each prompt is prefilled into its own cache row, then all
// unfinished rows advance together one token per step (one pass over the weights for the batch) until
// each emits EOS or reaches its length limit. Prompts keep their own lengths (no padding): row b's
// tokens sit at positions 0.. of row b, so results do not depend on what else is in the batch.
#include "backend/generate/decoder.h"
#include "backend/generate/sampler.h"

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mwb::data {
class Tokenizer;
}

namespace mwb::generate {

struct GenerateOptions {
    SamplingParams sampling;
    int64_t max_new_tokens = 64;
    int32_t eos = -1;          ///< stops a row (not part of its completion); -1: none
    int64_t vocab = 0;         ///< the tokenizer's ids [0, vocab) are the candidates (the model's are padded)
    int64_t first_stream = 0;  ///< row r draws from random stream first_stream + r (its prompt's index)
};

enum class FinishReason { Eos, Length };
const char* finish_reason_name(FinishReason r);

struct Completion {
    std::vector<int32_t> tokens;  ///< generated ids, without the EOS
    FinishReason finish = FinishReason::Length;
    double seconds = 0;  ///< from the start of the batch to this row's last token
};

/// Called for each generated token (not for the EOS) as soon as it is chosen.
using TokenCallback = std::function<void(int64_t row, int32_t token)>;
/// Called once per row as soon as it is finished (EOS or its limit), before the other rows go on.
using DoneCallback = std::function<void(int64_t row, const Completion& completion)>;

/// Generates a completion for each prompt (rows 0..n-1 of the decoder, reset first). A row's length
/// limit is max_new_tokens or what is left of the decoder's context, whichever is smaller; a prompt
/// that fills the context is an error naming it.
std::vector<Completion> complete(Decoder& decoder, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& options, const TokenCallback& on_token = {},
                                 const DoneCallback& on_done = {});

/// Turns one row's tokens into text as they come: each call returns the bytes the new token
/// completes. Bytes of an unfinished UTF-8 character wait for the next token (the piece is then "").
/// With a `context` (the prompt's ids), the tokens are decoded after it, so the pieces carry what a
/// tokenizer puts between the prompt and them (the NullTokenizer's space, SentencePiece's word start):
/// context_text() followed by every piece is decode(context + tokens).
class TextStream {
public:
    explicit TextStream(const data::Tokenizer& tokenizer, std::span<const int32_t> context = {});
    /// The context's text (its complete characters), which the pieces continue.
    std::string context_text() const { return text_.substr(0, emitted_); }
    std::string push(int32_t token);
    /// Whatever is left (an unfinished character at the end).
    std::string flush();

private:
    const data::Tokenizer& tokenizer_;
    std::vector<int32_t> ids_;
    std::size_t emitted_ = 0;
    std::string text_;
};

inline constexpr std::size_t kMaxPrompts = 64;
inline constexpr std::size_t kMaxPromptBytes = 4096;

/// A prompts file: one prompt per line (UTF-8; a trailing CR is dropped), empty lines ignored, at most
/// kMaxPrompts prompts of at most kMaxPromptBytes each. Throws mwb::Error naming `flag`, the file and
/// the line.
std::vector<std::string> read_prompts_file(const std::string& path, std::string_view flag);

/// A string safe to put in JSON: invalid UTF-8 sequences replaced by U+FFFD.
std::string valid_utf8(const std::string& s);

}  // namespace mwb::generate
