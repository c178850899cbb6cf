#pragma once
// Presets by name: resources/presets/<name>.json, config files like any other (docs/config.md).
#include "backend/config/config.h"

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace mwb::planner {

/// Names of the presets in resources_dir()/presets, sorted.
std::vector<std::string> preset_names();
std::filesystem::path preset_path(std::string_view name);
/// Loads a preset by name ("gpt3-175b") or file name; the error lists the presets there are.
Config load_preset(std::string_view name);

}  // namespace mwb::planner
