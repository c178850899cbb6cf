#include "backend/config/config_io.h"

#include <charconv>
#include <cmath>

namespace mwb {

namespace {

std::string join_issues(const std::vector<ConfigIssue>& issues, std::string_view context) {
    std::string s = issues.size() == 1 ? fmt::format("invalid configuration ({}): ", context)
                                       : fmt::format("invalid configuration ({}), {} problems:", context,
                                                     issues.size());
    for (const auto& issue : issues) s += issues.size() == 1 ? issue.message : "\n  - " + issue.message;
    return s;
}

bool in_choices(std::string_view choices, std::string_view value) {
    if (choices.empty()) return true;
    std::size_t start = 0;
    while (start <= choices.size()) {
        const std::size_t bar = choices.find('|', start);
        const std::string_view option = choices.substr(start, bar == std::string_view::npos ? bar : bar - start);
        if (option == value) return true;
        if (bar == std::string_view::npos) break;
        start = bar + 1;
    }
    return false;
}

std::string describe_choices(std::string_view choices) {
    std::string s;
    std::size_t start = 0;
    while (true) {
        const std::size_t bar = choices.find('|', start);
        std::string_view option = choices.substr(start, bar == std::string_view::npos ? bar : bar - start);
        if (!s.empty()) s += ", ";
        s += option.empty() ? "\"\" (none)" : fmt::format("{}", option);
        if (bar == std::string_view::npos) break;
        start = bar + 1;
    }
    return s;
}

/// SAX events of a JSON text that fails to parse: the last key seen and what went wrong there.
struct KeyOfError : nlohmann::json_sax<nlohmann::json> {
    std::string last_key, message;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return true; }
    bool key(string_t& k) override {
        last_key = k;
        return true;
    }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t position, const std::string& token, const nlohmann::detail::exception& e) override {
        if (e.id == 406) message = fmt::format("{} is not a finite number (expected a finite number)", token);
        else message = fmt::format("{} (at byte {})", e.what(), position), last_key.clear();
        return false;
    }
};

/// Assigns a JSON value to one field; returns an error message or "".
std::string assign(Config& config, const Field& field, const nlohmann::json& value) {
    return std::visit(
        [&](auto* p) -> std::string {
            using T = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_same_v<T, bool>) {
                if (!value.is_boolean()) return fmt::format("expected true or false, got {}", value.dump());
                *p = value.get<bool>();
            } else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>) {
                if (!value.is_number_integer() && !(value.is_number_float() && std::trunc(value.get<double>()) ==
                                                                                 value.get<double>()))
                    return fmt::format("expected an integer, got {}", value.dump());
                const double d = value.get<double>();
                if (d < static_cast<double>(std::numeric_limits<T>::min()) ||
                    d > static_cast<double>(std::numeric_limits<T>::max()))
                    return fmt::format("{} is out of range", value.dump());
                *p = value.is_number_integer() ? static_cast<T>(value.get<int64_t>()) : static_cast<T>(d);
            } else if constexpr (std::is_same_v<T, double>) {
                if (!value.is_number()) return fmt::format("expected a number, got {}", value.dump());
                if (!std::isfinite(value.get<double>())) return fmt::format("expected a finite number, got {}", value.dump());
                *p = value.get<double>();
            } else if constexpr (std::is_same_v<T, std::string>) {
                if (!value.is_string()) return fmt::format("expected a string, got {}", value.dump());
                const auto s = value.get<std::string>();
                if (!in_choices(field.choices, s))
                    return fmt::format("\"{}\" is not one of {}", s, describe_choices(field.choices));
                *p = s;
            } else {
                if (value.is_string()) {  // a single path is accepted for a list
                    *p = {value.get<std::string>()};
                    return "";
                }
                if (!value.is_array()) return fmt::format("expected a list of strings, got {}", value.dump());
                std::vector<std::string> items;
                for (const auto& item : value) {
                    if (item.is_string()) items.push_back(item.get<std::string>());
                    else if (item.is_number()) items.push_back(item.dump());
                    else return fmt::format("expected strings (or weights) in the list, got {}", item.dump());
                }
                *p = std::move(items);
            }
            return "";
        },
        field.ref(config));
}

}  // namespace

ConfigError::ConfigError(std::vector<ConfigIssue> issues, std::string_view context)
    : Error(join_issues(issues, context)), issues_(std::move(issues)) {}

void apply_json(Config& config, const nlohmann::json& json, std::string_view source) {
    if (!json.is_object()) throw ConfigError({{"", fmt::format("{} must hold a JSON object", source)}}, source);
    std::vector<ConfigIssue> issues;
    for (const auto& [key, value] : json.items()) {
        const Field* field = find_config_field(key);
        if (!field || key.find('-') != std::string::npos) {
            const std::string hint = closest_field_name(key);
            issues.push_back({key, fmt::format("unknown key \"{}\" in {}{}", key, source,
                                               hint.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", hint))});
            continue;
        }
        if (const std::string err = assign(config, *field, value); !err.empty())
            issues.push_back({key, fmt::format("{} in {}: {}", key, source, err)});
    }
    if (!issues.empty()) throw ConfigError(std::move(issues), source);
}

Config parse_config(std::string_view json_text, std::string_view source) {
    nlohmann::json json;
    try {
        json = nlohmann::json::parse(json_text);
    } catch (const nlohmann::json::exception&) {
        // Parsed again, event by event, to name the key whose value failed (e.g. 1e400: out of range).
        KeyOfError where;
        nlohmann::json::sax_parse(json_text, &where);
        if (!where.last_key.empty())
            throw ConfigError({{where.last_key, fmt::format("{} in {}: {}", where.last_key, source, where.message)}},
                              source);
        throw ConfigError({{"", fmt::format("{} is not valid JSON: {}", source, where.message)}}, source);
    }
    Config config;
    apply_json(config, json, source);
    return config;
}

Config load_config_file(const fs::path& path) {
    std::string text;
    try {
        text = read_file(path, 16 << 20);
    } catch (const Error& e) {
        throw ConfigError({{"", e.what()}}, "--config");
    }
    return parse_config(text, path.string());
}

nlohmann::json to_json(const Config& config) {
    nlohmann::json j = nlohmann::json::object();
    for (const Field& f : config_fields())
        std::visit([&](auto* p) { j[std::string(f.name)] = *p; }, f.ref(config));
    return j;
}

void set_field(Config& config, const Field& field, std::string_view value) {
    const std::string flag = field.flag();
    const auto bad = [&](std::string_view expected) {
        throw ConfigError({{std::string(field.name), fmt::format("{} {}: expected {}", flag, value, expected)}},
                          "command line");
    };
    std::visit(
        [&](auto* p) {
            using T = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_same_v<T, bool>) {
                if (value == "true" || value == "1" || value.empty()) *p = true;
                else if (value == "false" || value == "0") *p = false;
                else bad("true or false");
            } else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>) {
                T v{};
                const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
                if (ec != std::errc() || end != value.data() + value.size()) bad("an integer");
                *p = v;
            } else if constexpr (std::is_same_v<T, double>) {
                try {
                    std::size_t used = 0;
                    const double v = std::stod(std::string(value), &used);
                    if (used != value.size() || !std::isfinite(v)) bad("a finite number");
                    *p = v;
                } catch (const std::logic_error&) {  // also out of range: 1e400
                    bad("a finite number");
                }
            } else if constexpr (std::is_same_v<T, std::string>) {
                if (!in_choices(field.choices, value)) bad(fmt::format("one of {}", describe_choices(field.choices)));
                *p = std::string(value);
            } else {
                p->push_back(std::string(value));
            }
        },
        field.ref(config));
}

std::string config_reference_markdown() {
    std::string md;
    std::string_view group;
    const Config defaults;
    for (const Field& f : config_fields()) {
        if (f.group != group) {
            group = f.group;
            md += fmt::format("\n### {}\n\n| key | flag | type | default | meaning |\n| --- | --- | --- | --- | --- |\n",
                              group);
        }
        std::string def = to_json(defaults)[std::string(f.name)].dump();
        std::string help(f.help);
        if (!f.choices.empty()) help += " One of: " + describe_choices(f.choices) + ".";
        md += fmt::format("| `{}` | `{}` | {} | `{}` | {} |\n", f.name, f.flag(), f.type_name(), def, help);
    }
    return md;
}

}  // namespace mwb
