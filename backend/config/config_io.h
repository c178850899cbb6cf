#pragma once
// Reading and writing configurations: JSON files (the format the app saves and mwb-train reads),
// command-line values, and the generated reference docs/config.md.
#include "backend/config/config.h"
#include "backend/config/fields.h"
#include "backend/core/files.h"
#include "mwb/kernels/error.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace mwb {

/// One problem with a configuration, attached to the field that causes it (so the app can show it
/// next to that field).
struct ConfigIssue {
    std::string field;
    std::string message;
};

/// Thrown when a configuration cannot be used; what() lists every issue, one per line.
class ConfigError : public Error {
public:
    ConfigError(std::vector<ConfigIssue> issues, std::string_view context);
    const std::vector<ConfigIssue>& issues() const { return issues_; }

private:
    std::vector<ConfigIssue> issues_;
};

/// Applies the keys of a JSON object onto `config`. Unknown keys, wrong types and bad choices are
/// errors naming the key and `source` (a file name or "--config").
void apply_json(Config& config, const nlohmann::json& json, std::string_view source);
/// Megatron-LM defaults overlaid with the JSON file at `path`.
Config load_config_file(const fs::path& path);
/// Parses a config from JSON text (e.g. an embedded preset).
Config parse_config(std::string_view json_text, std::string_view source);
/// Every field, in table order.
nlohmann::json to_json(const Config& config);
/// Sets one field from its textual value (command-line flags); errors name the flag.
void set_field(Config& config, const Field& field, std::string_view value);
/// Markdown reference of every field (docs/config.md is generated from this).
std::string config_reference_markdown();

}  // namespace mwb
