#pragma once
// A whole file mapped read-only into memory (MAP_SHARED, so many ranks on one machine share the page
// cache). Datasets and their indices are read through it without copying.
#include "backend/core/files.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mwb {

class MappedFile {
public:
    /// Maps `path`; throws mwb::Error naming the path when it cannot be opened or mapped.
    explicit MappedFile(const fs::path& path);
    ~MappedFile();
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const unsigned char* data() const { return data_; }
    std::size_t size() const { return size_; }
    const fs::path& path() const { return path_; }

    /// Reads a little-endian T at byte `offset` (no alignment needed); the caller checked the bounds.
    template <typename T>
    T load(std::size_t offset) const {
        T v;
        std::memcpy(&v, data_ + offset, sizeof(T));
        return v;
    }

private:
    void release();
    fs::path path_;
    const unsigned char* data_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace mwb
