#pragma once
// The `sample` record (docs/protocol.md, mwb.telemetry/1.1) checked field by field: what the store
// keeps in its samples table and what the app's Samples panel shows. One table of fields
// (src/sample.cpp) gives the types, ranges and size limits; a record that breaks one is refused with
// the field named, never half-kept.
#include "mwb/store/types.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>

namespace mwb::store {

/// The limits of a sample's fields (the prompts file allows 64 prompts of at most 4096 bytes).
inline constexpr int64_t kMaxSamplePrompts = 64;
inline constexpr std::size_t kMaxPromptBytes = 4096;
inline constexpr std::size_t kMaxCompletionBytes = std::size_t{1} << 20;

/// A sample from a message body (envelope included: its seq, time and run_id are taken). nullopt and
/// `why` set ("field 'prompt_index' must be an integer in 0..63, got 70") when a required field is
/// missing or any field has the wrong type, is out of range or too long.
std::optional<SampleRecord> parse_sample(const nlohmann::json& body, std::string* why = nullptr);

}  // namespace mwb::store
