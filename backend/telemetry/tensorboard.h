#pragma once
// TensorBoard event files, so a Megatron-LM user's TensorBoard shows the run under the tags Megatron-LM
// writes ("lm loss", "learning-rate", ...). The format: TFRecord framing (uint64 length, masked
// CRC-32C of the length, the record, masked CRC-32C of the record) around Event protobuf messages
// (tensorflow/core/util/event.proto: wall_time = 1, step = 2, file_version = 3, summary = 5) whose
// Summary (summary.proto) holds Value{tag = 1, simple_value = 2}.
//
// Hand-written, not libprotobuf: three messages and six fields are written, never read, so a small
// encoder is less than vendoring TensorBoard's .proto files and running protoc in the build. The
// tests decode the files with Debian's protoc + python3-protobuf and python3-crcmod instead.
#include "backend/core/files.h"

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace mwb {

/// CRC-32C (Castagnoli) of `data`, and TFRecord's masked form of it.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

class TensorBoardWriter {
public:
    /// Creates `dir` and the event file events.out.tfevents.<seconds>.<host>.<pid>.0 in it (the name
    /// TensorBoard globs for), starting with the file_version record. Throws mwb::Error naming the path.
    explicit TensorBoardWriter(const fs::path& dir);
    /// One scalar (TensorBoard stores simple_value as float32).
    void add_scalar(std::string_view tag, double value, int64_t step);
    /// Makes what was written visible to a reader (called at each log interval and at the end).
    void flush();
    const fs::path& path() const { return path_; }

private:
    void write_event(const std::string& event);
    fs::path path_;
    std::ofstream out_;
};

}  // namespace mwb
