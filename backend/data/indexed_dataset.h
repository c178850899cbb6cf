#pragma once
// Megatron-LM's indexed dataset, byte for byte (megatron/core/datasets/indexed_dataset.py), so data
// prepared by Megatron-LM's preprocess_data.py loads here and ours loads there. PREFIX.bin holds the
// token ids of every sequence back to back; PREFIX.idx describes them (layout in docs/data.md):
//   "MMIDIDX\0\0" | u64 version = 1 | u8 dtype code | u64 S sequences | u64 D document indices
//   | i32 lengths[S] | i64 byte pointers[S] | i64 document indices[D] (0, ..., S)
// All integers little-endian, no padding. Document d is sequences [doc[d], doc[d + 1]).
#include "backend/core/mapped_file.h"

#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mwb::data {

/// Megatron's DType codes.
enum class TokenDType : uint8_t {
    UInt8 = 1,
    Int8 = 2,
    Int16 = 3,
    Int32 = 4,
    Int64 = 5,
    Float64 = 6,
    Float32 = 7,
    UInt16 = 8
};

int dtype_size(TokenDType dtype);
std::string_view dtype_name(TokenDType dtype);
/// Megatron's DType.optimal_dtype: uint16 for vocabularies below 65500 ids, else int32.
TokenDType optimal_dtype(int64_t vocab_size);

inline constexpr std::string_view kIndexMagic{"MMIDIDX\0\0", 9};
inline constexpr std::size_t kIndexHeaderBytes = 9 + 8 + 1 + 8 + 8;

fs::path idx_path(const std::string& prefix);
fs::path bin_path(const std::string& prefix);
/// Both PREFIX.idx and PREFIX.bin exist.
bool indexed_dataset_exists(const std::string& prefix);

/// Read-only, memory-mapped. The constructor validates everything a reader relies on (header, version,
/// dtype, array sizes against the file lengths, pointers inside .bin, document indices) and throws
/// mwb::Error naming the file and what is wrong.
class IndexedDataset {
public:
    explicit IndexedDataset(std::string prefix);

    const std::string& prefix() const { return prefix_; }
    TokenDType dtype() const { return dtype_; }
    int64_t sequence_count() const { return sequences_; }
    /// Documents; document_index() has one more entry.
    int64_t document_count() const { return doc_entries_ - 1; }
    int64_t token_count() const { return tokens_; }
    /// Hash of the .idx bytes and the .bin length: changes when the data is prepared again.
    uint64_t content_hash() const;

    int32_t sequence_length(int64_t i) const {
        return idx_.load<int32_t>(kIndexHeaderBytes + 4 * static_cast<std::size_t>(i));
    }
    int64_t sequence_pointer(int64_t i) const {
        return idx_.load<int64_t>(pointers_at_ + 8 * static_cast<std::size_t>(i));
    }
    /// First sequence of document i (i in [0, document_count()]; the last entry is sequence_count()).
    int64_t document_index(int64_t i) const {
        return idx_.load<int64_t>(documents_at_ + 8 * static_cast<std::size_t>(i));
    }

    /// Copies tokens [offset, offset + out.size()) of sequence `sequence` into `out`.
    void read(int64_t sequence, int64_t offset, std::span<int32_t> out) const;
    std::vector<int32_t> sequence(int64_t i) const;

private:
    void validate();
    std::string prefix_;
    MappedFile idx_, bin_;
    TokenDType dtype_ = TokenDType::UInt16;
    int64_t sequences_ = 0, doc_entries_ = 0, tokens_ = 0;
    std::size_t pointers_at_ = 0, documents_at_ = 0;
};

/// Writes PREFIX.bin + PREFIX.idx. Tokens stream to a temporary .bin; finalize() renames it into
/// place and then writes the .idx atomically, so a reader never sees a half-written dataset.
class IndexedDatasetBuilder {
public:
    IndexedDatasetBuilder(std::string prefix, TokenDType dtype);
    ~IndexedDatasetBuilder();  // without finalize(): removes the temporary file
    IndexedDatasetBuilder(const IndexedDatasetBuilder&) = delete;
    IndexedDatasetBuilder& operator=(const IndexedDatasetBuilder&) = delete;

    /// One document of one sequence, as preprocess_data.py writes it. An empty document gets no
    /// sequence (Megatron's add_document([], [])).
    void add_document(std::span<const int32_t> tokens);
    /// One document of several sequences (Megatron's sentences); the lengths sum to tokens.size().
    void add_document(std::span<const int32_t> tokens, std::span<const int32_t> sequence_lengths);
    void finalize();

    int64_t document_count() const { return static_cast<int64_t>(documents_.size()) - 1; }
    int64_t token_count() const { return tokens_; }

private:
    void write_tokens(std::span<const int32_t> tokens);
    std::string prefix_;
    TokenDType dtype_;
    fs::path tmp_bin_;
    std::FILE* bin_ = nullptr;
    std::vector<int32_t> lengths_;
    std::vector<int64_t> documents_{0};
    std::vector<unsigned char> buffer_;
    int64_t tokens_ = 0;
    bool finalized_ = false;
};

}  // namespace mwb::data
