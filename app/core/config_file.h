#pragma once
// Config files as the app saves them: the JSON mwb-train --config reads (docs/config.md), holding only
// the keys that differ from Megatron-LM's defaults (presets look the same), plus loading and presets.
// Qt-free.
#include "backend/config/config.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace mwb::app {

/// The keys of `config` whose values differ from a default Config, in field-table order.
nlohmann::ordered_json config_to_json(const Config& config);
/// config_to_json as text (2-space indent, newline at the end).
std::string config_to_text(const Config& config);
/// Writes the file atomically; throws mwb::Error naming the path.
void save_config_file(const std::filesystem::path& path, const Config& config);
/// Reads a config file as mwb-train does (unknown keys are errors); throws mwb::Error / ConfigError.
Config load_config_file_checked(const std::filesystem::path& path);
/// True when the two configs have the same value for every field.
bool same_config(const Config& a, const Config& b);

}  // namespace mwb::app
