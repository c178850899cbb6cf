#include "mwb/ipc/message.h"

#include <charconv>
#include <chrono>
#include <cmath>

namespace mwb::ipc {

namespace {

bool fail(std::string* why, std::string text) {
    if (why) *why = std::move(text);
    return false;
}

}  // namespace

bool schema_compatible(std::string_view schema, std::string_view family) {
    // family is "<name>/<major>"; accept exactly that or "<name>/<major>.<minor>".
    if (schema.size() < family.size() || schema.substr(0, family.size()) != family) return false;
    if (schema.size() == family.size()) return true;
    if (schema[family.size()] != '.') return false;
    const std::string_view minor = schema.substr(family.size() + 1);
    if (minor.empty()) return false;
    for (char c : minor)
        if (c < '0' || c > '9') return false;
    return true;
}

bool valid_topic(std::string_view topic) {
    if (topic.empty() || topic.size() > kMaxTopicBytes) return false;
    for (char c : topic)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')) return false;
    return true;
}

std::optional<Message> parse_message(std::string_view json, std::string* why) {
    if (json.size() > kMaxMessageBytes) {
        fail(why, "message of " + std::to_string(json.size()) + " bytes exceeds the limit of " +
                      std::to_string(kMaxMessageBytes));
        return std::nullopt;
    }
    Message m;
    m.body = nlohmann::json::parse(json.begin(), json.end(), nullptr, false);
    if (m.body.is_discarded() || !m.body.is_object()) {
        fail(why, "not a JSON object");
        return std::nullopt;
    }
    const auto schema = get_string(m.body, "schema");
    if (!schema || !schema_compatible(*schema, kTelemetrySchema)) {
        fail(why, "field schema: expected \"" + std::string(kTelemetrySchema) + "\"");
        return std::nullopt;
    }
    const auto topic = get_string(m.body, "topic");
    if (!topic || !valid_topic(*topic)) {
        fail(why, "field topic: expected a short lower-case string");
        return std::nullopt;
    }
    const auto run_id = get_string(m.body, "run_id");
    if (!run_id || run_id->empty() || run_id->size() > kMaxRunIdBytes) {
        fail(why, "field run_id: expected a non-empty string");
        return std::nullopt;
    }
    const auto seq = get_int(m.body, "seq");
    const int64_t min_seq = *topic == "heartbeat" ? -1 : 0;
    if (!seq || *seq < min_seq) {
        fail(why, "field seq: expected an integer >= " + std::to_string(min_seq));
        return std::nullopt;
    }
    const auto time = get_number(m.body, "time");
    if (!time) {
        fail(why, "field time: expected a number (Unix seconds)");
        return std::nullopt;
    }
    m.topic = *topic;
    m.run_id = *run_id;
    m.seq = *seq;
    m.time = *time;
    m.raw.assign(json);
    return m;
}

std::optional<int64_t> envelope_seq(std::string_view json, std::string_view topic) {
    // {"schema":"mwb.telemetry/1" then an optional minor ".N", then ","topic":"<topic>","run_id":"
    const std::string open = "{\"schema\":\"" + std::string(kTelemetrySchema);
    if (json.empty() || json.substr(0, open.size()) != open || json.back() != '}') return std::nullopt;
    std::size_t at = open.size();
    if (at < json.size() && json[at] == '.') {
        const std::size_t digits = at + 1;
        for (at = digits; at < json.size() && json[at] >= '0' && json[at] <= '9';) ++at;
        if (at == digits) return std::nullopt;
    }
    const std::string head = "\",\"topic\":\"" + std::string(topic) + "\",\"run_id\":\"";
    if (json.substr(at, head.size()) != head) return std::nullopt;
    const std::size_t id_start = at + head.size();
    const auto end_of_id = json.find('"', id_start);
    if (end_of_id == std::string_view::npos || end_of_id == id_start) return std::nullopt;
    const std::string_view rest = json.substr(end_of_id);
    if (rest.substr(0, 8) != "\",\"seq\":") return std::nullopt;
    int64_t seq = -1;
    const auto [stop, ec] = std::from_chars(rest.data() + 8, rest.data() + rest.size(), seq);
    if (ec != std::errc() || seq < 0 || stop == rest.data() + rest.size() || (*stop != ',' && *stop != '}'))
        return std::nullopt;
    return seq;
}

double unix_time() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace mwb::ipc
