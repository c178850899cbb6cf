// Publishing the typed records of docs/protocol.md (mwb/ipc/schema.h) into the run directory (file
// and telemetry stream); a null directory (ranks other than 0, or no run directory) publishes nothing.
#pragma once

#include "mwb/ipc/schema.h"
#include "backend/telemetry/run_dir.h"

namespace mwb {

/// A record under its own topic (Record::kTopic).
template <typename Record>
void publish_record(RunDir* dir, const Record& r) {
    if (dir) dir->publish(Record::kTopic, nlohmann::json(r));
}

/// An event of the "event" topic.
template <typename Event>
void publish_event(RunDir* dir, const Event& e) {
    if (dir) dir->publish(ipc::kEventTopic, ipc::event_json(e));
}

}  // namespace mwb
