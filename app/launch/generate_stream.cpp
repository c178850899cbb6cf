#include "app/launch/generate_stream.h"

#include <nlohmann/json.hpp>

namespace mwb::app {

namespace {

using nlohmann::json;

GenerateEvent error(std::string message) {
    GenerateEvent e;
    e.type = GenerateEvent::Type::Error;
    e.text = std::move(message);
    return e;
}

bool is_int(const json& o, const char* key) {
    return o.contains(key) && o[key].is_number_integer();
}

bool is_text(const json& o, const char* key) {
    return o.contains(key) && o[key].is_string();
}

}  // namespace

std::vector<GenerateEvent> GenerateStream::feed(std::string_view bytes) {
    std::vector<GenerateEvent> out;
    while (!bytes.empty()) {
        const auto nl = bytes.find('\n');
        const std::string_view part = bytes.substr(0, nl);
        if (!skipping_) {
            if (pending_.size() + part.size() > kMaxLineBytes) {
                out.push_back(error("mwb-generate wrote a line over " + std::to_string(kMaxLineBytes >> 20) +
                                    " MiB; it was skipped"));
                pending_.clear();
                skipping_ = true;
            } else {
                pending_.append(part);
            }
        }
        if (nl == std::string_view::npos) break;
        if (!skipping_) {
            auto events = line(pending_);
            out.insert(out.end(), events.begin(), events.end());
        }
        pending_.clear();
        skipping_ = false;
        bytes.remove_prefix(nl + 1);
    }
    return out;
}

std::vector<GenerateEvent> GenerateStream::finish() {
    std::vector<GenerateEvent> out;
    if (!skipping_ && !pending_.empty()) out = line(pending_);
    pending_.clear();
    skipping_ = false;
    return out;
}

std::vector<GenerateEvent> GenerateStream::line(std::string_view text) {
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) return {};
    const json j = json::parse(text, nullptr, false);
    const std::string shown(text.substr(0, 80));
    if (j.is_discarded() || !j.is_object() || !is_text(j, "type"))
        return {error("mwb-generate wrote a line that is not a JSON event: " + shown)};
    const std::string type = j["type"].get<std::string>();
    GenerateEvent e;
    if (type == "start") {
        e.type = GenerateEvent::Type::Start;
        e.prompts = is_int(j, "prompts") ? j["prompts"].get<int64_t>() : 1;
    } else if (type == "token") {
        if (!is_int(j, "prompt_index") || !is_text(j, "text"))
            return {error("mwb-generate: a token event without an integer prompt_index and a string text: " + shown)};
        e.type = GenerateEvent::Type::Token;
        e.prompt_index = j["prompt_index"].get<int64_t>();
        e.token = is_int(j, "token") ? j["token"].get<int64_t>() : -1;
        e.text = j["text"].get<std::string>();
    } else if (type == "done") {
        if (!is_int(j, "prompt_index") || !is_text(j, "completion"))
            return {
                error("mwb-generate: a done event without an integer prompt_index and a string completion: " + shown)};
        e.type = GenerateEvent::Type::Done;
        e.prompt_index = j["prompt_index"].get<int64_t>();
        e.text = j["completion"].get<std::string>();
        e.completion_tokens = is_int(j, "completion_tokens") ? j["completion_tokens"].get<int64_t>() : 0;
        e.finish_reason = is_text(j, "finish_reason") ? j["finish_reason"].get<std::string>() : "";
        e.tokens_per_sec =
            j.contains("tokens_per_sec") && j["tokens_per_sec"].is_number() ? j["tokens_per_sec"].get<double>() : 0;
    } else if (type == "error") {
        e = error(is_text(j, "message") ? j["message"].get<std::string>() : "mwb-generate failed");
    } else {
        return {};  // a type this version does not know: ignored, as the wire's unknown topics
    }
    return {e};
}

}  // namespace mwb::app
