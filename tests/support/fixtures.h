#pragma once
// Reading the committed reference fixtures (tests/fixtures/*.json) and making scratch directories.
#include "support/jsonl.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace mwb::test {

/// The source and build trees (the environment overrides the paths compiled in).
inline std::filesystem::path source_dir() {
    const char* dir = std::getenv("MWB_SOURCE_DIR");
    return dir ? dir : MWB_TEST_SOURCE_DIR;
}

inline std::filesystem::path binary_dir() {
    const char* dir = std::getenv("MWB_BINARY_DIR");
    return dir ? dir : MWB_TEST_BINARY_DIR;
}

inline nlohmann::json load_fixture(const std::string& name) {
    std::ifstream in(source_dir() / "tests" / "fixtures" / name);
    if (!in) throw std::runtime_error("missing fixture " + name);
    return nlohmann::json::parse(in);
}

/// The records of one topic in a run-directory file (metrics.jsonl, events.jsonl), in order.
/// Every record of `topic` in a run directory's jsonl file (one reader: support/jsonl.h).
inline std::vector<nlohmann::json> topic_records(const std::filesystem::path& file, const std::string& topic) {
    return jsonl_records(file, topic);
}

inline std::vector<unsigned char> base64_decode(const std::string& s) {
    static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::vector<unsigned char> out;
    uint32_t acc = 0;
    int bits = 0;
    for (char c : s) {
        if (c == '=') break;
        const auto pos = chars.find(c);
        if (pos == std::string::npos) continue;
        acc = (acc << 6) | static_cast<uint32_t>(pos);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(static_cast<unsigned char>((acc >> bits) & 0xFF));
        }
    }
    return out;
}

template <typename T>
std::vector<T> decode_array(const std::string& b64) {
    const auto bytes = base64_decode(b64);
    std::vector<T> v(bytes.size() / sizeof(T));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
    return v;
}

/// A directory under the system temp dir, removed with its contents on destruction.
class TempDir {
public:
    TempDir() {
        std::random_device rd;
        path_ = std::filesystem::temp_directory_path() / ("mwb-test-" + std::to_string(rd()) + std::to_string(rd()));
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    const std::filesystem::path& path() const { return path_; }
    std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

private:
    std::filesystem::path path_;
};

}  // namespace mwb::test
