#pragma once
// --split "969,30,1": how each dataset's sequences are divided into train, valid and test, exactly as
// Megatron-LM does it (parse_and_normalize_split, convert_split_vector_to_split_matrix and the
// bookends of BlendedMegatronDatasetBuilder): contiguous ranges, in order, rounded half to even.
#include <array>
#include <cstdint>
#include <string_view>

namespace mwb::data {

enum class Split { Train = 0, Valid = 1, Test = 2 };
std::string_view split_name(Split split);

/// The three proportions normalised to sum 1 (missing ones are 0); errors name the field.
std::array<double, 3> parse_split(std::string_view split);

struct SequenceRange {
    int64_t begin = 0, end = 0;
    int64_t size() const { return end - begin; }
};
/// The [begin, end) sequences of each split of a dataset of `count` sequences.
std::array<SequenceRange, 3> split_ranges(std::string_view split, int64_t count);

}  // namespace mwb::data
