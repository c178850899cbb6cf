#pragma once
// Text -> Megatron-LM indexed dataset, as tools/preprocess_data.py does it: JSON lines ({"text": ...}
// per line, one document per line and key) or plain text files, tokenised in parallel, written in input
// order to {output_prefix}_{key}_document.{bin,idx}. A document's text may also be a list of strings
// (Megatron's pre-split sentences): each non-empty one becomes a sequence.
#include "backend/data/tokenizer.h"

#include <functional>
#include <string>
#include <vector>

namespace mwb::data {

/// One document's token ids and the lengths of its sequences (empty text: no sequence at all).
struct EncodedDocument {
    std::vector<int32_t> tokens;
    std::vector<int32_t> lengths;
};

/// Megatron's Encoder.encode for one text; --append-eod adds the EOD id to the last sequence.
void encode_text(const Tokenizer& tok, std::string_view text, bool append_eod, EncodedDocument& out);

/// Runs work(i) for every i in [0, n) on `threads` threads (the caller's included); rethrows the first
/// exception after all threads stopped.
void parallel_for(int64_t n, int threads, const std::function<void(int64_t)>& work);

enum class TextUnit { File, Paragraph, Line };

struct PreprocessOptions {
    std::vector<std::string> inputs;             ///< .json/.jsonl: JSON lines; anything else: plain text
    std::string output_prefix;                   ///< writes {output_prefix}_{key}_document.{bin,idx}
    std::vector<std::string> json_keys{"text"};  ///< keys read from each JSON line (text files use the first)
    bool append_eod = false;                     ///< end every non-empty document with the EOD id
    int workers = 0;                             ///< tokenising threads; 0 = every core
    TextUnit text_unit = TextUnit::File;         ///< what a document is in a plain text file
    bool progress = true;                        ///< progress line on stderr
};

struct PreprocessResult {
    std::vector<std::string> prefixes;  ///< one per json key
    int64_t documents = 0, tokens = 0, bytes = 0;
    double seconds = 0;
};

/// Throws mwb::Error naming the file (and line) of any input it cannot read or parse.
PreprocessResult preprocess(const PreprocessOptions& options, const Tokenizer& tok);

}  // namespace mwb::data
