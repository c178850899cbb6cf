#include "backend/data/indexed_dataset.h"

#include "mwb/kernels/error.h"

#include <xxhash.h>

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <limits>
#include <random>

static_assert(std::endian::native == std::endian::little, "the file formats are little-endian; so is this code");

namespace mwb::data {

int dtype_size(TokenDType dtype) {
    switch (dtype) {
        case TokenDType::UInt8:
        case TokenDType::Int8:
            return 1;
        case TokenDType::Int16:
        case TokenDType::UInt16:
            return 2;
        case TokenDType::Int32:
        case TokenDType::Float32:
            return 4;
        case TokenDType::Int64:
        case TokenDType::Float64:
            return 8;
    }
    return 0;
}

std::string_view dtype_name(TokenDType dtype) {
    switch (dtype) {
        case TokenDType::UInt8:
            return "uint8";
        case TokenDType::Int8:
            return "int8";
        case TokenDType::Int16:
            return "int16";
        case TokenDType::Int32:
            return "int32";
        case TokenDType::Int64:
            return "int64";
        case TokenDType::Float64:
            return "float64";
        case TokenDType::Float32:
            return "float32";
        case TokenDType::UInt16:
            return "uint16";
    }
    return "?";
}

TokenDType optimal_dtype(int64_t vocab_size) {
    return vocab_size < 65500 ? TokenDType::UInt16 : TokenDType::Int32;
}

fs::path idx_path(const std::string& prefix) {
    return prefix + ".idx";
}
fs::path bin_path(const std::string& prefix) {
    return prefix + ".bin";
}

bool indexed_dataset_exists(const std::string& prefix) {
    std::error_code ec;
    return fs::is_regular_file(idx_path(prefix), ec) && fs::is_regular_file(bin_path(prefix), ec);
}

// ---- reading -------------------------------------------------------------------------------------

IndexedDataset::IndexedDataset(std::string prefix)
    : prefix_(std::move(prefix)), idx_(idx_path(prefix_)), bin_(bin_path(prefix_)) {
    validate();
}

void IndexedDataset::validate() {
    const std::string idx = idx_.path().string(), bin = bin_.path().string();
    const std::size_t size = idx_.size();
    MWB_CHECK(size >= kIndexHeaderBytes,
              "'{}' is {} bytes, shorter than the {}-byte header of a Megatron-LM index: truncated, or not an index",
              idx, size, kIndexHeaderBytes);
    MWB_CHECK(std::string_view(reinterpret_cast<const char*>(idx_.data()), 9) == kIndexMagic,
              "'{}' does not start with \"MMIDIDX\\0\\0\": not a Megatron-LM indexed dataset index", idx);
    const auto version = idx_.load<uint64_t>(9);
    MWB_CHECK(version == 1, "'{}' has format version {}; only version 1 (Megatron-LM's MMIDIDX) is known", idx,
              version);
    const auto code = idx_.load<uint8_t>(17);
    MWB_CHECK(code >= 1 && code <= 8, "'{}' has dtype code {}; expected 1..8 (Megatron's uint8 .. uint16)", idx, code);
    dtype_ = static_cast<TokenDType>(code);
    MWB_CHECK(dtype_ != TokenDType::Float32 && dtype_ != TokenDType::Float64,
              "'{}' stores {} values; token ids need an integer dtype", idx, dtype_name(dtype_));
    const auto s = idx_.load<uint64_t>(18), d = idx_.load<uint64_t>(26);
    // Bound the counts before multiplying so a garbage header cannot overflow the size arithmetic.
    const uint64_t max_count = size / 4;
    MWB_CHECK(s <= max_count && d <= max_count && d >= 1,
              "'{}' claims {} sequences and {} document indices, impossible for a file of {} bytes: corrupt header",
              idx, s, d, size);
    sequences_ = static_cast<int64_t>(s);
    doc_entries_ = static_cast<int64_t>(d);
    pointers_at_ = kIndexHeaderBytes + 4 * s;
    documents_at_ = pointers_at_ + 8 * s;
    const std::size_t expected = documents_at_ + 8 * d;
    // Multimodal indices append one int8 mode per sequence; the modes are not needed for GPT.
    MWB_CHECK(size == expected || size == expected + s,
              "'{}' is {} bytes, but {} sequences and {} document indices need {} bytes: truncated or corrupt", idx,
              size, s, d, expected);

    MWB_CHECK(document_index(0) == 0, "'{}': document indices must start at 0 (found {})", idx, document_index(0));
    for (int64_t i = 1; i < doc_entries_; ++i) {
        const int64_t a = document_index(i - 1), b = document_index(i);
        MWB_CHECK(b >= a && b <= sequences_, "'{}': document index {} is {} after {} (must rise to the {} sequences)",
                  idx, i, b, a, sequences_);
    }
    MWB_CHECK(document_index(doc_entries_ - 1) == sequences_,
              "'{}': the last document index is {}, expected the sequence count {}", idx,
              document_index(doc_entries_ - 1), sequences_);

    const int item = dtype_size(dtype_);
    const auto bin_size = static_cast<int64_t>(bin_.size());
    tokens_ = 0;
    for (int64_t i = 0; i < sequences_; ++i) {
        const int64_t len = sequence_length(i), ptr = sequence_pointer(i);
        MWB_CHECK(len >= 0, "'{}': sequence {} has negative length {}", idx, i, len);
        MWB_CHECK(ptr >= 0 && ptr % item == 0 && ptr <= bin_size && len <= (bin_size - ptr) / item,
                  "'{}' is {} bytes, but sequence {} ({} {} tokens at byte {}) runs past it: truncated .bin, or an "
                  ".idx of another dataset",
                  bin, bin_size, i, len, dtype_name(dtype_), ptr);
        tokens_ += len;
    }
    // Megatron-LM's builder writes the tokens back to back: the .bin holds exactly them. A dtype code
    // that contradicts the data (int32 tokens read as uint16) shows as a size mismatch here.
    MWB_CHECK(tokens_ * item == bin_size,
              "'{}' is {} bytes, but '{}' records {} tokens of {} ({} bytes): the index's dtype code ({}) does not "
              "match the data, or the files belong to different datasets",
              bin, bin_size, idx, tokens_, dtype_name(dtype_), tokens_ * item, static_cast<int>(code));
}

uint64_t IndexedDataset::content_hash() const {
    return XXH3_64bits_withSeed(idx_.data(), idx_.size(), static_cast<uint64_t>(bin_.size()));
}

namespace {

template <typename T>
void convert(const unsigned char* src, std::span<int32_t> out, const IndexedDataset& ds, int64_t sequence) {
    for (std::size_t i = 0; i < out.size(); ++i) {
        T v;
        std::memcpy(&v, src + i * sizeof(T), sizeof(T));
        if constexpr (sizeof(T) > 4) {
            MWB_CHECK(v >= 0 && v <= std::numeric_limits<int32_t>::max(),
                      "'{}.bin': token {} in sequence {} is out of range", ds.prefix(), static_cast<int64_t>(v),
                      sequence);
        }
        out[i] = static_cast<int32_t>(v);
    }
}

}  // namespace

void IndexedDataset::read(int64_t sequence, int64_t offset, std::span<int32_t> out) const {
    MWB_CHECK(sequence >= 0 && sequence < sequences_, "'{}': sequence {} is outside [0, {})", prefix_, sequence,
              sequences_);
    const int64_t len = sequence_length(sequence);
    MWB_CHECK(offset >= 0 && offset + static_cast<int64_t>(out.size()) <= len,
              "'{}': tokens [{}, {}) of sequence {} are outside its {} tokens", prefix_, offset,
              offset + static_cast<int64_t>(out.size()), sequence, len);
    const unsigned char* src = bin_.data() + sequence_pointer(sequence) + offset * dtype_size(dtype_);
    switch (dtype_) {
        case TokenDType::UInt8:
            convert<uint8_t>(src, out, *this, sequence);
            break;
        case TokenDType::Int8:
            convert<int8_t>(src, out, *this, sequence);
            break;
        case TokenDType::Int16:
            convert<int16_t>(src, out, *this, sequence);
            break;
        case TokenDType::UInt16:
            convert<uint16_t>(src, out, *this, sequence);
            break;
        case TokenDType::Int32:
            convert<int32_t>(src, out, *this, sequence);
            break;
        case TokenDType::Int64:
            convert<int64_t>(src, out, *this, sequence);
            break;
        default:
            MWB_FAIL("'{}': {} tokens cannot be read", prefix_, dtype_name(dtype_));
    }
}

std::vector<int32_t> IndexedDataset::sequence(int64_t i) const {
    MWB_CHECK(i >= 0 && i < sequences_, "'{}': sequence {} is outside [0, {})", prefix_, i, sequences_);
    std::vector<int32_t> out(static_cast<std::size_t>(sequence_length(i)));
    read(i, 0, out);
    return out;
}

// ---- writing -------------------------------------------------------------------------------------

IndexedDatasetBuilder::IndexedDatasetBuilder(std::string prefix, TokenDType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype) {
    MWB_CHECK(dtype_ != TokenDType::Float32 && dtype_ != TokenDType::Float64, "'{}': tokens need an integer dtype",
              prefix_);
    const fs::path final_bin = bin_path(prefix_);
    const fs::path dir = final_bin.parent_path().empty() ? fs::path(".") : final_bin.parent_path();
    std::error_code ec;
    fs::create_directories(dir, ec);
    MWB_CHECK(!ec, "cannot create directory '{}': {}", dir.string(), ec.message());
    tmp_bin_ = dir / fmt::format(".{}.tmp-{:x}", final_bin.filename().string(), std::random_device{}());
    bin_ = std::fopen(tmp_bin_.c_str(), "wb");
    MWB_CHECK(bin_, "cannot write '{}': {}", tmp_bin_.string(), std::strerror(errno));
    std::setvbuf(bin_, nullptr, _IOFBF, std::size_t{1} << 20);
}

IndexedDatasetBuilder::~IndexedDatasetBuilder() {
    if (bin_) std::fclose(bin_);
    if (!finalized_) {
        std::error_code ec;
        fs::remove(tmp_bin_, ec);
    }
}

void IndexedDatasetBuilder::write_tokens(std::span<const int32_t> tokens) {
    const int item = dtype_size(dtype_);
    int64_t lo = 0, hi = std::numeric_limits<int32_t>::max();
    switch (dtype_) {
        case TokenDType::UInt8:
            hi = 255;
            break;
        case TokenDType::Int8:
            lo = -128, hi = 127;
            break;
        case TokenDType::Int16:
            lo = -32768, hi = 32767;
            break;
        case TokenDType::UInt16:
            hi = 65535;
            break;
        default:
            lo = std::numeric_limits<int32_t>::min();
            break;
    }
    buffer_.resize(tokens.size() * static_cast<std::size_t>(item));
    unsigned char* dst = buffer_.data();
    for (std::size_t i = 0; i < tokens.size(); ++i, dst += item) {
        const int32_t t = tokens[i];
        MWB_CHECK(t >= lo && t <= hi, "'{}': token id {} does not fit the dataset's dtype {}", prefix_, t,
                  dtype_name(dtype_));
        switch (dtype_) {
            case TokenDType::UInt8:
                *dst = static_cast<uint8_t>(t);
                break;
            case TokenDType::Int8:
                *dst = static_cast<unsigned char>(static_cast<int8_t>(t));
                break;
            case TokenDType::Int16: {
                const auto v = static_cast<int16_t>(t);
                std::memcpy(dst, &v, 2);
                break;
            }
            case TokenDType::UInt16: {
                const auto v = static_cast<uint16_t>(t);
                std::memcpy(dst, &v, 2);
                break;
            }
            case TokenDType::Int32:
                std::memcpy(dst, &t, 4);
                break;
            default: {
                const auto v = static_cast<int64_t>(t);
                std::memcpy(dst, &v, 8);
                break;
            }
        }
    }
    MWB_CHECK(std::fwrite(buffer_.data(), 1, buffer_.size(), bin_) == buffer_.size(), "cannot write '{}': {}",
              tmp_bin_.string(), std::strerror(errno));
    tokens_ += static_cast<int64_t>(tokens.size());
}

void IndexedDatasetBuilder::add_document(std::span<const int32_t> tokens) {
    const int32_t n = static_cast<int32_t>(tokens.size());
    MWB_CHECK(tokens.size() <= static_cast<std::size_t>(std::numeric_limits<int32_t>::max()),
              "'{}': a document of {} tokens is over the int32 length limit of the format", prefix_, tokens.size());
    add_document(tokens, tokens.empty() ? std::span<const int32_t>{} : std::span<const int32_t>(&n, 1));
}

void IndexedDatasetBuilder::add_document(std::span<const int32_t> tokens, std::span<const int32_t> sequence_lengths) {
    MWB_CHECK(!finalized_, "'{}': add_document after finalize", prefix_);
    int64_t total = 0;
    for (const int32_t len : sequence_lengths) {
        MWB_CHECK(len >= 0, "'{}': negative sequence length {}", prefix_, len);
        total += len;
    }
    MWB_CHECK(total == static_cast<int64_t>(tokens.size()),
              "'{}': sequence lengths sum to {}, the document has {} tokens", prefix_, total, tokens.size());
    write_tokens(tokens);
    lengths_.insert(lengths_.end(), sequence_lengths.begin(), sequence_lengths.end());
    documents_.push_back(static_cast<int64_t>(lengths_.size()));
}

void IndexedDatasetBuilder::finalize() {
    MWB_CHECK(!finalized_, "'{}': finalize called twice", prefix_);
    const bool flushed = std::fflush(bin_) == 0 && ::fsync(fileno(bin_)) == 0;
    const bool closed = std::fclose(bin_) == 0;
    bin_ = nullptr;
    MWB_CHECK(flushed && closed, "cannot write '{}': {}", tmp_bin_.string(), std::strerror(errno));
    std::error_code ec;
    fs::rename(tmp_bin_, bin_path(prefix_), ec);
    MWB_CHECK(!ec, "cannot rename '{}' to '{}': {}", tmp_bin_.string(), bin_path(prefix_).string(), ec.message());
    finalized_ = true;

    const uint64_t s = lengths_.size(), d = documents_.size();
    std::string idx;
    idx.reserve(kIndexHeaderBytes + 12 * s + 8 * d);
    const auto put = [&idx](const auto& v) { idx.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    idx.append(kIndexMagic);
    put(uint64_t{1});
    put(static_cast<uint8_t>(dtype_));
    put(s);
    put(d);
    idx.append(reinterpret_cast<const char*>(lengths_.data()), 4 * s);
    int64_t pointer = 0;
    for (const int32_t len : lengths_) {
        put(pointer);
        pointer += static_cast<int64_t>(len) * dtype_size(dtype_);
    }
    idx.append(reinterpret_cast<const char*>(documents_.data()), 8 * d);
    write_file_atomic(idx_path(prefix_), idx);
}

}  // namespace mwb::data
