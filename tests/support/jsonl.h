#pragma once
// The records of a run directory's jsonl files (metrics.jsonl, events.jsonl) for one topic.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace mwb::test {

/// Every record of `topic` in `file`, in order. A line that is not JSON throws, unless `live` (a file a
/// running process is still appending to, whose last line may be half-written): then it is skipped.
inline std::vector<nlohmann::json> jsonl_records(const std::filesystem::path& file, const std::string& topic,
                                                 bool live = false) {
    std::vector<nlohmann::json> out;
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
        auto j = nlohmann::json::parse(line, nullptr, !live);
        if (j.is_discarded()) continue;
        if (j["topic"] == topic) out.push_back(std::move(j));
    }
    return out;
}

}  // namespace mwb::test
