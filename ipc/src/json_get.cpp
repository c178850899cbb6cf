#include "mwb/ipc/json_get.h"

#include <cmath>

namespace mwb::ipc {

std::optional<std::string> get_string(const nlohmann::json& o, const char* key) {
    if (!o.is_object()) return std::nullopt;
    const auto it = o.find(key);
    if (it == o.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
}

std::optional<int64_t> get_int(const nlohmann::json& o, const char* key) {
    if (!o.is_object()) return std::nullopt;
    const auto it = o.find(key);
    if (it == o.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<int64_t>();
}

std::optional<double> get_number(const nlohmann::json& o, const char* key) {
    if (!o.is_object()) return std::nullopt;
    const auto it = o.find(key);
    if (it == o.end() || !it->is_number()) return std::nullopt;
    const double v = it->get<double>();
    if (!std::isfinite(v)) return std::nullopt;
    return v;
}

std::optional<int64_t> get_integral(const nlohmann::json& o, const char* key) {
    if (!o.is_object()) return std::nullopt;
    const auto it = o.find(key);
    if (it == o.end() || !it->is_number()) return std::nullopt;
    if (it->is_number_integer()) return it->get<int64_t>();
    const double v = it->get<double>();
    return std::isfinite(v) ? std::optional<int64_t>(static_cast<int64_t>(v)) : std::nullopt;
}

}  // namespace mwb::ipc
