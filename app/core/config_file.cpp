#include "app/core/config_file.h"

#include "backend/config/config_io.h"
#include "backend/config/fields.h"
#include "backend/core/files.h"

namespace mwb::app {

nlohmann::ordered_json config_to_json(const Config& config) {
    const nlohmann::json all = to_json(config);
    const nlohmann::json defaults = to_json(Config{});
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const Field& f : config_fields()) {
        const std::string key(f.name);
        if (!all.contains(key)) continue;
        if (defaults.contains(key) && defaults[key] == all[key]) continue;
        out[key] = all[key];
    }
    return out;
}

std::string config_to_text(const Config& config) {
    return config_to_json(config).dump(2) + "\n";
}

void save_config_file(const std::filesystem::path& path, const Config& config) {
    write_file_atomic(path, config_to_text(config));
}

Config load_config_file_checked(const std::filesystem::path& path) {
    return load_config_file(path);
}

bool same_config(const Config& a, const Config& b) {
    return to_json(a) == to_json(b);
}

}  // namespace mwb::app
