#include "mwb/ipc/requests.h"

#include "mwb/ipc/message.h"

#include <algorithm>

namespace mwb::ipc {

namespace {

nlohmann::json parse_request(std::string_view body, std::string_view schema, std::string* why) {
    if (body.size() > kMaxRequestBytes) {
        if (why)
            *why = "request of " + std::to_string(body.size()) + " bytes exceeds " + std::to_string(kMaxRequestBytes);
        return nlohmann::json::value_t::discarded;
    }
    auto j = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
        if (why) *why = "not a JSON object";
        return nlohmann::json::value_t::discarded;
    }
    const auto s = get_string(j, "schema");
    if (!s || !schema_compatible(*s, schema)) {
        if (why) *why = "field schema: expected \"" + std::string(schema) + "\"";
        return nlohmann::json::value_t::discarded;
    }
    return j;
}

}  // namespace

std::string_view refusal_code(Refusal refusal) {
    switch (refusal) {
        case Refusal::BadRequest:
            return "bad_request";
        case Refusal::Unauthorized:
            return "unauthorized";
        case Refusal::DuplicateId:
            return "duplicate_id";
        case Refusal::Busy:
            return "busy";
        case Refusal::RunEnded:
            return "run_ended";
        case Refusal::RateLimited:
            return "rate_limited";
    }
    return "bad_request";
}

nlohmann::json refusal_reply(Refusal refusal, const std::string& message) {
    return {{"ok", false}, {"code", refusal_code(refusal)}, {"error", message}};
}

std::string request_id_of(std::string_view body) {
    if (body.size() > kMaxRequestBytes) return "";
    const auto j = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return "";
    const auto id = get_string(j, "id");
    return id && id->size() <= kMaxRequestIdBytes ? *id : "";
}

std::optional<SnapshotRequest> parse_snapshot_request(std::string_view body, std::string* why) {
    const auto j = parse_request(body, kSnapshotSchema, why);
    if (j.is_discarded()) return std::nullopt;
    SnapshotRequest r;
    const auto since = get_int(j, "since");
    if (!since || *since < 0) {
        if (why) *why = "field since: expected an integer >= 0";
        return std::nullopt;
    }
    r.since = *since;
    if (j.contains("max")) {
        const auto max = get_int(j, "max");
        if (!max || *max < 1) {
            if (why) *why = "field max: expected an integer >= 1";
            return std::nullopt;
        }
        r.max = static_cast<std::size_t>(*max);
    }
    return r;
}

std::optional<ControlCommand> parse_control_request(std::string_view body, std::string* why) {
    const auto j = parse_request(body, kControlSchema, why);
    if (j.is_discarded()) return std::nullopt;
    ControlCommand c;
    const auto action = get_string(j, "action");
    if (!action ||
        std::find(std::begin(kControlActions), std::end(kControlActions), *action) == std::end(kControlActions)) {
        if (why) *why = "field action: expected one of pause, resume, checkpoint, stop, status";
        return std::nullopt;
    }
    c.action = *action;
    if (j.contains("id")) {
        const auto id = get_string(j, "id");
        if (!id || id->size() > kMaxRequestIdBytes) {
            if (why) *why = "field id: expected a string of at most " + std::to_string(kMaxRequestIdBytes) + " bytes";
            return std::nullopt;
        }
        c.id = *id;
    }
    if (j.contains("token")) {
        const auto token = get_string(j, "token");
        if (!token || token->size() > 256) {
            if (why) *why = "field token: expected a string";
            return std::nullopt;
        }
        c.token = *token;
    }
    return c;
}

std::string make_snapshot_request(int64_t since, std::size_t max) {
    nlohmann::ordered_json j = {{"schema", kSnapshotSchema}, {"since", since}};
    if (max > 0) j["max"] = max;
    return j.dump();
}

std::string make_control_request(std::string_view action, std::string_view id, std::string_view token) {
    nlohmann::ordered_json j = {{"schema", kControlSchema}, {"action", action}, {"id", id}};
    if (!token.empty()) j["token"] = token;
    return j.dump();
}

}  // namespace mwb::ipc
