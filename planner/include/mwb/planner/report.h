#pragma once
// What mwb-plan prints: readable tables, and JSON whose memory section uses the allocator's category
// names and layout (by_category {current, peak}, allocated, peak) so it compares field by field with
// the `mem` record mwb-train writes to metrics.jsonl (docs/run-directory.md).
#include "mwb/planner/plan.h"
#include "mwb/planner/search.h"

#include <nlohmann/json.hpp>

#include <string>

namespace mwb::planner {

std::string text_report(const Plan& p);
std::string text_search_report(const SearchResult& r, const Plan& base);

nlohmann::json to_json(const Plan& p);
nlohmann::json to_json(const SearchResult& r);
/// The memory of one stage as mwb-train's `mem` record: allocated, peak, by_category {current, peak}.
nlohmann::json memory_json(const StageMemory& s);

/// "1.23 GiB", "512.0 MiB", "12.0 KiB", "17 B".
std::string format_bytes(double bytes);
/// "1.75e+11" style for big counts in tables: "175.0 B", "2.7 M", "950".
std::string format_count(double n);

}  // namespace mwb::planner
