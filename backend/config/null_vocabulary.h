#pragma once
// The NullTokenizer's vocabulary as Megatron-LM defines it, in one place for the tokenizer (data/)
// and the model's vocabulary (config/validate): header-only because mwb_data does not link mwb_config.
#include "backend/config/config.h"

#include <nlohmann/json.hpp>

#include <cstdint>

namespace mwb {

struct NullVocabulary {
    int64_t size = 0;  ///< token ids, EOD included
    int64_t eod = 0;
};

/// Current Megatron-LM (core_v0.18.0 on): vocab_size ids, EOD = null_tokenizer_eod_id or vocab_size - 1.
/// Older releases (null_tokenizer_legacy_eod): vocab_size + 1 ids, EOD = vocab_size.
inline NullVocabulary null_tokenizer_vocabulary(const DataConfig& data, const ModelConfig& model) {
    const int64_t n = model.vocab_size;
    if (data.null_tokenizer_legacy_eod) return {n + 1, n};
    return {n, data.null_tokenizer_eod_id >= 0 ? int64_t{data.null_tokenizer_eod_id} : n - 1};
}

/// Whether a saved configuration (a checkpoint's metadata) has the legacy NullTokenizer vocabulary:
/// its null_tokenizer_legacy_eod, and true for a NullTokenizer configuration saved before that field
/// existed (every NullTokenizer vocabulary was vocab_size + 1 then).
inline bool saved_legacy_null_vocabulary(const nlohmann::json& saved) {
    return saved.is_object() && saved.value("tokenizer_type", std::string()) == "NullTokenizer" &&
           saved.value("null_tokenizer_legacy_eod", true);
}

}  // namespace mwb
