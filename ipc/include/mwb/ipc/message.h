#pragma once
// The wire's message schema (docs/protocol.md). Every telemetry message is one JSON object with the
// envelope {schema, topic, run_id, seq, time} followed by its topic's fields; on the PUB socket it
// travels as the multipart [topic, json]. Receivers validate the envelope and ignore fields and
// topics they do not know; the schema string changes only for incompatible changes.
#include "mwb/ipc/json_get.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mwb::ipc {

inline constexpr std::string_view kTelemetrySchema = "mwb.telemetry/1";  ///< the family readers accept (1.x)
/// What this version writes (RunDir's kTelemetrySchema): 1.1 adds the `sample` topic.
inline constexpr std::string_view kTelemetrySchemaWritten = "mwb.telemetry/1.1";
inline constexpr std::string_view kSnapshotSchema = "mwb.snapshot/1";  ///< "everything since seq N"
inline constexpr std::string_view kControlSchema = "mwb.control/1";    ///< pause/resume/checkpoint/stop/status

/// Size limits checked on every incoming frame (the sockets also refuse larger messages).
inline constexpr std::size_t kMaxMessageBytes = std::size_t{16} << 20;  ///< one telemetry message
inline constexpr std::size_t kMaxRequestBytes = 4096;                   ///< a snapshot or control request
inline constexpr std::size_t kMaxTopicBytes = 64;
inline constexpr std::size_t kMaxRunIdBytes = 256;

/// Topics this version knows; others are passed through untouched.
inline constexpr std::string_view kKnownTopics[] = {"run.start", "step",      "eval",    "memory",
                                                    "event",     "heartbeat", "run.end", "sample"};

/// One validated telemetry message.
struct Message {
    std::string topic;
    std::string run_id;
    int64_t seq = -1;     ///< for heartbeats: the last seq published so far (-1: none yet)
    double time = 0;      ///< Unix seconds
    nlohmann::json body;  ///< the whole object, envelope included
    std::string raw;      ///< the JSON text as received

    bool is_heartbeat() const { return topic == "heartbeat"; }
};

/// Parses and validates one telemetry message (size, JSON, envelope types, schema family and major
/// version). Returns nullopt and sets `why` when it is not one.
std::optional<Message> parse_message(std::string_view json, std::string* why = nullptr);

/// The seq of a message as RunDir writes it (envelope first: {"schema":"mwb.telemetry/1[.N]","topic":...,
/// "run_id":...,"seq":N,...}) without parsing the rest: the publisher's fast path for its own
/// messages. nullopt when the text does not start that way (then use parse_message).
std::optional<int64_t> envelope_seq(std::string_view json, std::string_view topic);

/// True when `schema` is `family` with the same major version ("mwb.telemetry/1" accepts
/// "mwb.telemetry/1" and "mwb.telemetry/1.3", not "mwb.telemetry/2").
bool schema_compatible(std::string_view schema, std::string_view family);

/// Topics are short, lower case, [a-z0-9._-].
bool valid_topic(std::string_view topic);

/// Seconds since the Unix epoch.
double unix_time();

}  // namespace mwb::ipc
