#pragma once
// Helpers shared by the data suites: temporary directories, small indexed datasets with known tokens,
// and file byte manipulation for corruption tests.
#include "backend/data/indexed_dataset.h"
#include "mwb/kernels/error.h"

#include <QTemporaryDir>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace mwb::test {

/// Token j of sequence i in the synthetic datasets: distinct enough to tell sequences and offsets apart.
inline int32_t synthetic_token(int64_t i, int64_t j) {
    return static_cast<int32_t>((i * 131 + j * 7 + 1) % 60000);
}

/// Writes PREFIX.{bin,idx} with one sequence per document of the given lengths.
inline void write_synthetic_dataset(const std::string& prefix, const std::vector<int32_t>& lengths,
                                    data::TokenDType dtype = data::TokenDType::UInt16) {
    data::IndexedDatasetBuilder b(prefix, dtype);
    std::vector<int32_t> tokens;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
        tokens.resize(static_cast<std::size_t>(lengths[i]));
        for (int32_t j = 0; j < lengths[i]; ++j)
            tokens[static_cast<std::size_t>(j)] = synthetic_token(static_cast<int64_t>(i), j);
        // An empty document still needs a sequence here, so sequence i is document i.
        const int32_t n = lengths[i];
        b.add_document(tokens, std::span<const int32_t>(&n, 1));
    }
    b.finalize();
}

inline std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Runs f and returns the mwb::Error message it throws ("" when it does not throw).
template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const mwb::Error& e) {
        return e.what();
    }
    return {};
}

}  // namespace mwb::test
