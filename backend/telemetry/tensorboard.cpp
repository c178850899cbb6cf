#include "backend/telemetry/tensorboard.h"

#include "mwb/kernels/error.h"

#include <unistd.h>

#include <array>
#include <bit>
#include <chrono>
#include <cstring>

namespace mwb {

namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
        t[i] = c;
    }
    return t;
}
constexpr auto kCrc32cTable = make_crc32c_table();

// Protocol-buffer wire format: a field key is (number << 3 | wire type); 0 varint, 1 fixed64,
// 2 length-delimited, 5 fixed32. Little-endian fixed widths.
void put_varint(std::string& s, uint64_t v) {
    while (v >= 0x80) {
        s.push_back(static_cast<char>((v & 0x7f) | 0x80));
        v >>= 7;
    }
    s.push_back(static_cast<char>(v));
}

template <typename T>
void put_fixed(std::string& s, T v) {
    static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    s.append(b, sizeof(T));
}

void put_bytes(std::string& s, int field, std::string_view bytes) {
    put_varint(s, static_cast<uint64_t>(field) << 3 | 2);
    put_varint(s, bytes.size());
    s.append(bytes);
}

double wall_time() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// Event{wall_time = 1 (double), step = 2 (int64)} without its payload.
std::string event_head(int64_t step) {
    std::string e;
    put_varint(e, 1 << 3 | 1);
    put_fixed(e, wall_time());
    put_varint(e, 2 << 3 | 0);
    put_varint(e, static_cast<uint64_t>(step));
    return e;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
    uint32_t c = 0xFFFFFFFFu;
    for (const char ch : data) c = kCrc32cTable[(c ^ static_cast<uint8_t>(ch)) & 0xff] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
    const uint32_t c = crc32c(data);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const fs::path& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    MWB_CHECK(!ec, "tensorboard_dir '{}': cannot create it ({})", dir.string(), ec.message());
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    const auto seconds = static_cast<int64_t>(wall_time());
    path_ = dir / fmt::format("events.out.tfevents.{}.{}.{}.0", seconds, host, getpid());
    out_.open(path_, std::ios::binary | std::ios::trunc);
    MWB_CHECK(out_.good(), "tensorboard_dir '{}': cannot write {}", dir.string(), path_.string());
    std::string e = event_head(0);
    put_bytes(e, 3, "brain.Event:2");  // file_version
    write_event(e);
    flush();
}

void TensorBoardWriter::add_scalar(std::string_view tag, double value, int64_t step) {
    std::string v;  // Summary.Value{tag = 1, simple_value = 2 (float)}
    put_bytes(v, 1, tag);
    put_varint(v, 2 << 3 | 5);
    put_fixed(v, static_cast<float>(value));
    std::string summary;  // Summary{value = 1 (repeated)}
    put_bytes(summary, 1, v);
    std::string e = event_head(step);
    put_bytes(e, 5, summary);
    write_event(e);
}

void TensorBoardWriter::write_event(const std::string& event) {
    std::string header;
    put_fixed(header, static_cast<uint64_t>(event.size()));
    std::string record = header;
    put_fixed(record, masked_crc32c(header));
    record += event;
    put_fixed(record, masked_crc32c(event));
    out_.write(record.data(), static_cast<std::streamsize>(record.size()));
}

void TensorBoardWriter::flush() {
    out_.flush();
    MWB_CHECK(out_.good(), "tensorboard: writing {} failed (disk full?)", path_.string());
}

}  // namespace mwb
