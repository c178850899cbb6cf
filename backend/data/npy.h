#pragma once
// NumPy's .npy format (version 1.0), enough for the index caches: C-ordered little-endian integer
// arrays of one or two dimensions. numpy.load() reads what we write, and we check what we read.
#include "backend/core/files.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mwb::data {

template <typename T>
constexpr std::string_view npy_descr() {
    if constexpr (std::is_same_v<T, int32_t>)
        return "<i4";
    else if constexpr (std::is_same_v<T, uint32_t>)
        return "<u4";
    else if constexpr (std::is_same_v<T, int64_t>)
        return "<i8";
    else if constexpr (std::is_same_v<T, int16_t>)
        return "<i2";
    else
        static_assert(sizeof(T) == 0, "unsupported .npy element type");
}

/// The bytes of a .npy file holding `data` with `shape` (the product of shape is data's element count).
std::string npy_encode(std::string_view descr, std::span<const int64_t> shape, const void* data, std::size_t bytes);

struct NpyHeader {
    std::string descr;
    std::vector<int64_t> shape;
    std::size_t data_offset = 0;
};
/// Parses and checks the header of `content` (magic, version, C order, data length); errors name `origin`.
NpyHeader npy_parse(std::string_view content, const fs::path& origin);

template <typename T>
void write_npy(const fs::path& path, std::span<const T> data, std::span<const int64_t> shape) {
    write_file_atomic(path, npy_encode(npy_descr<T>(), shape, data.data(), data.size_bytes()));
}

struct NpyInts {
    std::string descr;
    std::vector<int64_t> shape;
    std::vector<int64_t> values;  ///< C order, widened to int64
};
/// Reads a .npy of any little-endian integer dtype; throws mwb::Error naming the file when it is not one.
NpyInts read_npy_ints(const fs::path& path);

}  // namespace mwb::data
