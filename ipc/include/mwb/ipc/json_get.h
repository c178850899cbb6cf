#pragma once
// Reading one member of a received JSON object without exceptions: the one set of getters every
// reader of the wire (ipc, store, app) uses. nullopt when the member is missing or of another type.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace mwb::ipc {

/// The member `key` when it is a string / an integer / a finite number, else nullopt.
std::optional<std::string> get_string(const nlohmann::json& object, const char* key);
std::optional<int64_t> get_int(const nlohmann::json& object, const char* key);
std::optional<double> get_number(const nlohmann::json& object, const char* key);
/// An integer, or a finite number truncated to one: counts as files of other writers may hold them.
std::optional<int64_t> get_integral(const nlohmann::json& object, const char* key);

}  // namespace mwb::ipc
