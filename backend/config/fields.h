#pragma once
// The table of configuration fields: one row per setting, binding its Megatron-LM name to the member
// of Config that holds it. JSON keys, command-line flags, validation messages and docs/config.md all
// come from this table, so a setting is named and described in exactly one place.
#include "backend/config/config.h"

#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace mwb {

using FieldRef = std::variant<int*, int64_t*, double*, bool*, std::string*, std::vector<std::string>*>;

struct Field {
    std::string_view name;     ///< snake_case, as Megatron-LM's argument
    std::string_view group;    ///< model | parallel | training | data | logging
    std::string_view help;     ///< one line for --help and docs/config.md
    std::string_view choices;  ///< allowed values of a string field, "a|b|c" ("" = free text)
    FieldRef (*bind)(Config&);

    /// The command-line flag, --kebab-case.
    std::string flag() const;
    /// "int", "float", "bool", "string" or "list".
    std::string_view type_name() const;
    FieldRef ref(Config& c) const { return bind(c); }
    FieldRef ref(const Config& c) const { return bind(const_cast<Config&>(c)); }
};

std::span<const Field> config_fields();
/// Looks a field up by snake_case or kebab-case name; nullptr when there is none.
const Field* find_config_field(std::string_view name);
/// The closest field name to a misspelt one (for "did you mean ...?"), or "" when nothing is close.
std::string closest_field_name(std::string_view name);
/// The candidate closest to `name` by edit distance, or "" when none is reasonably close.
std::string closest_name(std::string_view name, std::span<const std::string_view> candidates);

}  // namespace mwb
