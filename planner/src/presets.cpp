#include "mwb/planner/presets.h"

#include "backend/config/config_io.h"
#include "mwb/planner/cluster.h"

#include <algorithm>

namespace mwb::planner {

std::vector<std::string> preset_names() {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(resources_dir() / "presets", ec))
        if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

std::filesystem::path preset_path(std::string_view name) {
    std::string file(name);
    if (!file.ends_with(".json")) file += ".json";
    return resources_dir() / "presets" / file;
}

Config load_preset(std::string_view name) {
    const std::filesystem::path path = preset_path(name);
    if (!std::filesystem::exists(path)) {
        std::string known;
        for (const std::string& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
        throw Error(fmt::format("unknown preset \"{}\" (no {}; presets: {})", name, path.string(), known));
    }
    return load_config_file(path);
}

}  // namespace mwb::planner
