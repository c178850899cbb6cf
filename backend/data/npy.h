#pragma once
// NumPy's .npy format (version 1.0), enough for the index caches: C-ordered little-endian integer
// arrays of one or two dimensions. numpy.load() reads what we write, and we check what we read.
#include "core/files.h"

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mwb::data {

template <typename T>
constexpr std::string_view npy_descr() {
    if constexpr (std::is_same_v<T, int32_t>) return "<i4";
    else if constexpr (std::is_same_v<T, uint32_t>) return "<u4";
    else if constexpr (std::is_same_v<T, int64_t>) return "<i8";
    else if constexpr (std::is_same_v<T, int16_t>) return "<i2";
    else static_assert(sizeof(T) == 0, "unsupported .npy element type");
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

[[noreturn]] void npy_mismatch(const fs::path& path, const NpyHeader& h, std::string_view descr, std::size_t rank);

template <typename T>
void write_npy(const fs::path& path, std::span<const T> data, std::span<const int64_t> shape) {
    write_file_atomic(path, npy_encode(npy_descr<T>(), shape, data.data(), data.size_bytes()));
}

/// Reads a .npy of element type T and `rank` dimensions; throws mwb::Error naming the file otherwise.
template <typename T>
std::vector<T> read_npy(const fs::path& path, std::size_t rank, std::vector<int64_t>* shape = nullptr) {
    const std::string content = read_file(path, std::size_t{1} << 40);
    const NpyHeader h = npy_parse(content, path);
    if (h.descr != npy_descr<T>() || h.shape.size() != rank) npy_mismatch(path, h, npy_descr<T>(), rank);
    std::vector<T> out((content.size() - h.data_offset) / sizeof(T));
    std::memcpy(out.data(), content.data() + h.data_offset, out.size() * sizeof(T));
    if (shape) *shape = h.shape;
    return out;
}

}  // namespace mwb::data
