#pragma once
// Hugging Face's safetensors format, read by memory mapping and written atomically:
//   8 bytes   N, the header's length (little-endian u64)
//   N bytes   JSON: {"__metadata__": {str: str}, NAME: {"dtype": "BF16", "shape": [..],
//             "data_offsets": [begin, end]}, ...}, padded with spaces
//   the data  every tensor's little-endian bytes at [8 + N + begin, 8 + N + end)
// Reading validates everything before a byte of data is used: the header's size (at most 100 MB, as
// the reference implementation), its JSON, every entry's fields, a known dtype, shape x dtype size ==
// its byte range, ranges inside the file, sorted without overlap or gap, covering the data exactly.
// Any violation is an mwb::Error naming the file and the tensor. Sharded checkpoints
// (model-0000x-of-0000y.safetensors with model.safetensors.index.json) are read by SafetensorsModel.
#include "backend/core/files.h"
#include "backend/core/mapped_file.h"

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mwb::interop {

enum class StDtype { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

/// "BF16" etc.; bytes per element.
const char* dtype_name(StDtype d);
std::size_t dtype_size(StDtype d);

struct StTensor {
    std::string name;
    StDtype dtype = StDtype::F32;
    std::vector<int64_t> shape;
    const unsigned char* data = nullptr;  ///< inside the mapping
    std::size_t bytes = 0;
    int64_t numel() const;
};

class SafetensorsFile {
public:
    /// Maps and validates `path` (see the top); throws naming the file and the tensor.
    explicit SafetensorsFile(const fs::path& path);
    const fs::path& path() const { return file_.path(); }
    /// In file order.
    const std::vector<StTensor>& tensors() const { return tensors_; }
    /// nullptr when absent.
    const StTensor* find(std::string_view name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    /// The tensor's values as float32 (F32, F16, BF16, F64 exactly or by rounding F64; integer types
    /// by value). `out` must hold numel() values; errors name the file and the tensor.
    void read_f32(const StTensor& t, std::span<float> out) const;

private:
    MappedFile file_;
    std::vector<StTensor> tensors_;
    std::map<std::string, std::string> metadata_;
};

/// A tensor to write: `bytes` are its little-endian values in `dtype`.
struct StWriteTensor {
    std::string name;
    StDtype dtype = StDtype::F32;
    std::vector<int64_t> shape;
    std::span<const unsigned char> bytes;
};

/// Writes a safetensors file through a memory mapping of a temporary file that is fsynced and renamed
/// into place (readers never see half a file). Names must be unique and not "__metadata__"; byte
/// sizes must match shape x dtype. Tensors are laid out in the order given.
void write_safetensors(const fs::path& path, const std::vector<StWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// A model directory's weights as Hugging Face's save_pretrained lays them out: `model.safetensors` when
/// they fit in `max_shard_bytes`, else `model-0000i-of-0000n.safetensors` (tensors in the order given; a
/// new shard when the next tensor would pass the limit, a larger tensor alone) and
/// `model.safetensors.index.json` ({"metadata": {"total_size": bytes}, "weight_map": name -> shard}),
/// written last. Weight files of another sharding left in `dir` are removed. Returns the files written.
std::vector<fs::path> write_safetensors_model(const fs::path& dir, const std::vector<StWriteTensor>& tensors,
                                              uint64_t max_shard_bytes,
                                              const std::map<std::string, std::string>& metadata = {});

/// A size as Hugging Face's --max-shard-size takes it: "5GB" (10^9 bytes), "500MB", "2GiB" (2^30),
/// "100KB", or plain bytes. Errors name the text.
uint64_t parse_byte_size(std::string_view text);

/// float32 -> F32 / F16 / BF16 bytes (round to nearest even), appended to `out`.
void encode_f32(std::span<const float> values, StDtype dtype, std::vector<unsigned char>& out);

/// A Hugging Face model directory's weights: model.safetensors, or the shards that
/// model.safetensors.index.json's weight_map names (each shard validated; every mapped tensor must be
/// in its shard, no tensor in two shards).
class SafetensorsModel {
public:
    explicit SafetensorsModel(const fs::path& dir);
    /// Every tensor name, sorted.
    std::vector<std::string> names() const;
    /// The tensor and the file that holds it; throws naming the directory when absent.
    const StTensor& get(std::string_view name) const;
    const SafetensorsFile& file_of(std::string_view name) const;
    bool contains(std::string_view name) const;

private:
    fs::path dir_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, std::pair<const SafetensorsFile*, const StTensor*>, std::less<>> index_;
};

}  // namespace mwb::interop
