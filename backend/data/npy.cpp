#include "backend/data/npy.h"

#include "mwb/kernels/error.h"

#include <charconv>
#include <cstring>

namespace mwb::data {

namespace {
constexpr std::string_view kMagic{"\x93NUMPY", 6};
}

std::string npy_encode(std::string_view descr, std::span<const int64_t> shape, const void* data, std::size_t bytes) {
    std::string dims;
    for (const int64_t d : shape) dims += fmt::format("{}, ", d);
    if (shape.size() > 1)
        dims.resize(dims.size() - 2);  // "(3,)" for one dimension, "(3, 2)" for two
    else if (!dims.empty())
        dims.resize(dims.size() - 1);
    std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
    // numpy pads the header with spaces and a newline so the data starts at a multiple of 64 bytes.
    const std::size_t total = kMagic.size() + 2 + 2 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header.push_back('\n');
    std::string out;
    out.reserve(kMagic.size() + 4 + header.size() + bytes);
    out.append(kMagic);
    out.push_back('\x01');
    out.push_back('\x00');
    const auto len = static_cast<uint16_t>(header.size());
    out.push_back(static_cast<char>(len & 0xff));
    out.push_back(static_cast<char>(len >> 8));
    out += header;
    out.append(static_cast<const char*>(data), bytes);
    return out;
}

NpyHeader npy_parse(std::string_view content, const fs::path& origin) {
    const std::string file = origin.string();
    MWB_CHECK(content.size() >= 10 && content.substr(0, 6) == kMagic, "'{}' is not a .npy file (no \\x93NUMPY magic)",
              file);
    const int major = static_cast<unsigned char>(content[6]);
    std::size_t header_len = 0, header_at = 0;
    if (major == 1) {
        header_len = static_cast<unsigned char>(content[8]) |
                     (static_cast<std::size_t>(static_cast<unsigned char>(content[9])) << 8);
        header_at = 10;
    } else {
        MWB_CHECK((major == 2 || major == 3) && content.size() >= 12, "'{}': unknown .npy version {}", file, major);
        for (int i = 0; i < 4; ++i)
            header_len |= static_cast<std::size_t>(static_cast<unsigned char>(content[8 + i])) << (8 * i);
        header_at = 12;
    }
    MWB_CHECK(header_at + header_len <= content.size(), "'{}': .npy header runs past the end of the file", file);
    const std::string_view dict = content.substr(header_at, header_len);
    NpyHeader h;
    h.data_offset = header_at + header_len;

    const auto value_after = [&](std::string_view key) {
        const std::size_t k = dict.find(key);
        MWB_CHECK(k != std::string_view::npos, "'{}': .npy header has no {}", file, key);
        std::size_t v = dict.find(':', k);
        MWB_CHECK(v != std::string_view::npos, "'{}': malformed .npy header", file);
        ++v;
        while (v < dict.size() && dict[v] == ' ') ++v;
        return v;
    };
    std::size_t v = value_after("'descr'");
    MWB_CHECK(v < dict.size() && dict[v] == '\'', "'{}': malformed descr in .npy header", file);
    const std::size_t end = dict.find('\'', v + 1);
    MWB_CHECK(end != std::string_view::npos, "'{}': malformed descr in .npy header", file);
    h.descr = std::string(dict.substr(v + 1, end - v - 1));
    v = value_after("'fortran_order'");
    MWB_CHECK(dict.substr(v, 5) == "False", "'{}': Fortran-ordered arrays are not supported", file);
    v = value_after("'shape'");
    MWB_CHECK(v < dict.size() && dict[v] == '(', "'{}': malformed shape in .npy header", file);
    const std::size_t close = dict.find(')', v);
    MWB_CHECK(close != std::string_view::npos, "'{}': malformed shape in .npy header", file);
    for (std::size_t i = v + 1; i < close;) {
        while (i < close && (dict[i] == ' ' || dict[i] == ',')) ++i;
        if (i >= close) break;
        int64_t d = 0;
        const auto [ptr, ec] = std::from_chars(dict.data() + i, dict.data() + close, d);
        MWB_CHECK(ec == std::errc() && d >= 0, "'{}': malformed shape in .npy header", file);
        h.shape.push_back(d);
        i = static_cast<std::size_t>(ptr - dict.data());
    }
    int64_t count = 1;
    for (const int64_t d : h.shape) count *= d;
    std::size_t item = 0;
    if (h.descr.size() == 3 && (h.descr[0] == '<' || h.descr[0] == '|'))
        item = static_cast<std::size_t>(h.descr[2] - '0');
    MWB_CHECK(item == 1 || item == 2 || item == 4 || item == 8, "'{}': unsupported .npy dtype '{}'", file, h.descr);
    MWB_CHECK(content.size() - h.data_offset == static_cast<std::size_t>(count) * item,
              "'{}' holds {} data bytes, its header promises {} ({} elements of {}): truncated or corrupt", file,
              content.size() - h.data_offset, static_cast<std::size_t>(count) * item, count, h.descr);
    return h;
}

namespace {
template <typename T>
void widen(std::string_view bytes, std::vector<int64_t>& out) {
    out.resize(bytes.size() / sizeof(T));
    for (std::size_t i = 0; i < out.size(); ++i) {
        T v;
        std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
        out[i] = static_cast<int64_t>(v);
    }
}
}  // namespace

NpyInts read_npy_ints(const fs::path& path) {
    const std::string content = read_file(path, std::size_t{1} << 40);
    const NpyHeader h = npy_parse(content, path);
    NpyInts out{h.descr, h.shape, {}};
    const std::string_view bytes = std::string_view(content).substr(h.data_offset);
    if (h.descr == "<i8")
        widen<int64_t>(bytes, out.values);
    else if (h.descr == "<u4")
        widen<uint32_t>(bytes, out.values);
    else if (h.descr == "<i4")
        widen<int32_t>(bytes, out.values);
    else if (h.descr == "<i2")
        widen<int16_t>(bytes, out.values);
    else if (h.descr == "<u2")
        widen<uint16_t>(bytes, out.values);
    else
        MWB_FAIL("'{}' holds '{}' values, expected little-endian integers", path.string(), h.descr);
    return out;
}

}  // namespace mwb::data
