// parse_sample: one table of the `sample` record's fields drives the checks (type, range, size).
#include "mwb/store/sample.h"

#include <cmath>
#include <string_view>
#include <variant>

namespace mwb::store {

namespace {

using nlohmann::json;

using M = ipc::SampleMessage;
using Target = std::variant<int64_t M::*, uint64_t M::*, double M::*, std::string M::*, bool M::*>;

struct Field {
    const char* name;
    Target target;
    bool required;
    double lo = 0, hi = 0;         ///< numbers and integers: the inclusive range
    std::size_t max_bytes = 0;     ///< strings
    const char* const* allowed{};  ///< strings from a fixed set (null-terminated list)
};

constexpr double kMaxInt = 9007199254740992.0;  // 2^53: exact in a JSON number everywhere
constexpr const char* kFinishReasons[] = {"eos", "length", nullptr};

// clang-format off
const Field kFields[] = {
    {"iteration",         &M::iteration,         true,  0, kMaxInt},
    {"consumed_tokens",   &M::consumed_tokens,   false, 0, kMaxInt},
    {"prompt_index",      &M::prompt_index,      true,  0, kMaxSamplePrompts - 1},
    {"prompt",            &M::prompt,            true,  0, 0, kMaxPromptBytes},
    {"completion",        &M::completion,        true,  0, 0, kMaxCompletionBytes},
    {"prompt_tokens",     &M::prompt_tokens,     false, 0, 1 << 24},
    {"completion_tokens", &M::completion_tokens, false, 0, 1 << 24},
    {"finish_reason",     &M::finish_reason,     false, 0, 0, 16, kFinishReasons},
    {"greedy",            &M::greedy,            false},
    {"temperature",       &M::temperature,       false, 0, 1e6},
    {"top_k",             &M::top_k,             false, 0, 1 << 24},
    {"top_p",             &M::top_p,             false, 0, 1},
    {"seed",              &M::seed,              false, -kMaxInt, kMaxInt},
    {"time_s",            &M::time_s,            false, 0, 1e7},
};
// clang-format on

std::string range(const Field& f, bool integer) {
    auto num = [&](double v) { return integer ? std::to_string(static_cast<int64_t>(v)) : json(v).dump(); };
    return num(f.lo) + ".." + num(f.hi);
}

/// Checks `v` against `f` and stores it in `r`; the problem otherwise.
std::optional<std::string> take(const Field& f, const json& v, M& r) {
    const std::string name = std::string("field '") + f.name + "'";
    const auto* pi = std::get_if<int64_t M::*>(&f.target);
    const auto* pu = std::get_if<uint64_t M::*>(&f.target);
    if (pi || pu) {
        // 3.0 is an integer; 3.5 is not
        const bool ok = v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                                  std::floor(v.get<double>()) == v.get<double>());
        const double d = ok ? v.get<double>() : 0;
        if (!ok || d < f.lo || d > f.hi)
            return name + " must be an integer in " + range(f, true) + ", got " + v.dump().substr(0, 40);
        const int64_t n = v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(d);
        // the seed is unsigned in the record; a negative one (in range) keeps its bits, as the
        // store's integer column gives it back
        if (pi) r.*(*pi) = n;
        if (pu) r.*(*pu) = static_cast<uint64_t>(n);
    } else if (const auto* pd = std::get_if<double M::*>(&f.target)) {
        const double d = v.is_number() ? v.get<double>() : NAN;
        if (!std::isfinite(d) || d < f.lo || d > f.hi)
            return name + " must be a number in " + range(f, false) + ", got " + v.dump().substr(0, 40);
        r.*(*pd) = d;
    } else if (const auto* pb = std::get_if<bool M::*>(&f.target)) {
        if (!v.is_boolean()) return name + " must be true or false, got " + v.dump().substr(0, 40);
        r.*(*pb) = v.get<bool>();
    } else if (const auto* ps = std::get_if<std::string M::*>(&f.target)) {
        if (!v.is_string()) return name + " must be a string, got " + v.dump().substr(0, 40);
        const auto& s = v.get_ref<const std::string&>();
        if (s.size() > f.max_bytes)
            return name + " is " + std::to_string(s.size()) + " bytes; at most " + std::to_string(f.max_bytes);
        if (f.allowed) {
            bool known = false;
            std::string list;
            for (auto a = f.allowed; *a; ++a) {
                known = known || s == *a;
                list += (list.empty() ? "" : " or ") + std::string(*a);
            }
            if (!known) return name + " must be " + list + ", got " + v.dump().substr(0, 40);
        }
        r.*(*ps) = s;
    }
    return std::nullopt;
}

}  // namespace

std::optional<SampleRecord> parse_sample(const json& body, std::string* why) {
    auto fail = [&](std::string problem) {
        if (why) *why = "sample: " + std::move(problem);
        return std::nullopt;
    };
    if (!body.is_object()) return fail("not a JSON object");
    SampleRecord r;
    for (const Field& f : kFields) {
        const auto it = body.find(f.name);
        if (it == body.end() || it->is_null()) {
            if (f.required) return fail(std::string("field '") + f.name + "' is missing");
            continue;
        }
        if (auto problem = take(f, *it, r)) return fail(std::move(*problem));
    }
    if (const auto it = body.find("seq"); it != body.end() && it->is_number_integer()) r.seq = it->get<int64_t>();
    if (const auto it = body.find("time"); it != body.end() && it->is_number()) r.time = it->get<double>();
    if (const auto it = body.find("run_id"); it != body.end() && it->is_string()) r.run = it->get<std::string>();
    return r;
}

}  // namespace mwb::store
