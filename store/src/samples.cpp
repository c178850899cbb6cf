// The samples table: writing one record, migration 4's move out of events, and the reads behind the
// Monitor's Samples panel and the History's prompt comparison.
#include "mwb/store/error.h"
#include "mwb/store/sample.h"
#include "mwb/store/store.h"
#include "statements.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace mwb::store {

namespace {

constexpr const char* kColumns =
    "seq, iteration, prompt_index, time, consumed_tokens, prompt, completion, prompt_tokens, completion_tokens, "
    "finish_reason, greedy, temperature, top_k, top_p, seed, time_s";

SampleRecord read_sample(const Statement& s, const std::string& uid) {
    SampleRecord r;
    r.run = uid;
    r.seq = s.int64(0);
    r.iteration = s.int64(1);
    r.prompt_index = s.int64(2);
    r.time = s.optional_real(3);
    r.consumed_tokens = s.optional_int64(4).value_or(0);
    r.prompt = s.text(5);
    r.completion = s.text(6);
    r.prompt_tokens = s.optional_int64(7).value_or(0);
    r.completion_tokens = s.optional_int64(8).value_or(0);
    r.finish_reason = s.text(9);
    r.greedy = s.optional_int64(10).value_or(1) != 0;
    r.temperature = s.optional_real(11).value_or(0);
    r.top_k = s.optional_int64(12).value_or(0);
    r.top_p = s.optional_real(13).value_or(1);
    r.seed = static_cast<uint64_t>(s.optional_int64(14).value_or(0));  // the column keeps the bits
    r.time_s = s.optional_real(15).value_or(0);
    return r;
}

}  // namespace

const char* const kInsertSampleSql =
    "INSERT OR IGNORE INTO samples (run, seq, iteration, prompt_index, time, consumed_tokens, prompt, completion, "
    "prompt_tokens, completion_tokens, finish_reason, greedy, temperature, top_k, top_p, seed, time_s) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

void bind_sample(Statement& q, int64_t run, const SampleRecord& s) {
    q.bind(1, run).bind(2, s.seq).bind(3, s.iteration).bind(4, s.prompt_index).bind(5, s.time);
    q.bind(6, s.consumed_tokens).bind(7, s.prompt).bind(8, s.completion).bind(9, s.prompt_tokens);
    q.bind(10, s.completion_tokens).bind(11, s.finish_reason).bind(12, int64_t{s.greedy});
    q.bind(13, s.temperature)
        .bind(14, s.top_k)
        .bind(15, s.top_p)
        .bind(16, static_cast<int64_t>(s.seed))
        .bind(17, s.time_s);
}

void move_sample_events(Database& db) {
    Statement old = db.prepare("SELECT run, seq, body FROM events WHERE topic = 'sample'");
    Statement insert = db.prepare(kInsertSampleSql);
    Statement drop = db.prepare("DELETE FROM events WHERE run = ? AND seq = ?");
    std::vector<std::pair<int64_t, int64_t>> moved;
    while (old.step()) {
        const auto body = nlohmann::json::parse(old.text(2), nullptr, false);
        const auto sample = parse_sample(body);
        if (!sample) continue;  // stays an event, as an invalid sample arriving now would
        bind_sample(insert, old.int64(0), *sample);
        insert.bind(2, old.int64(1));  // the stored seq is the one that counts
        insert.run();
        moved.emplace_back(old.int64(0), old.int64(1));
    }
    for (const auto& [run, seq] : moved) drop.bind(1, run).bind(2, seq).run();
}

std::vector<SampleRecord> Store::samples(const std::string& uid, const SampleQuery& query) {
    std::string sql = std::string("SELECT ") + kColumns + " FROM samples WHERE run = ?1";
    if (query.iteration) sql += " AND iteration = ?2";
    if (query.prompt_index) sql += " AND prompt_index = ?3";
    sql += " ORDER BY iteration DESC, prompt_index, seq DESC LIMIT ?4";
    Statement s = db_.prepare(sql);
    s.bind(1, run_row_or_throw(uid));
    if (query.iteration) s.bind(2, *query.iteration);
    if (query.prompt_index) s.bind(3, *query.prompt_index);
    s.bind(4, static_cast<int64_t>(std::max(0, query.limit)));
    std::vector<SampleRecord> out;
    while (s.step()) out.push_back(read_sample(s, uid));
    return out;
}

std::vector<std::string> Store::sample_prompts(const std::vector<std::string>& uids) {
    // Skip-scan over samples_by_prompt: one seek per distinct prompt, not a read of every sample.
    Statement first = db_.prepare("SELECT prompt, prompt_index FROM samples WHERE run = ? ORDER BY prompt LIMIT 1");
    Statement next =
        db_.prepare("SELECT prompt, prompt_index FROM samples WHERE run = ? AND prompt > ? ORDER BY prompt LIMIT 1");
    std::vector<std::tuple<int64_t, std::size_t, std::string>> found;  // prompt index, first seen, prompt
    std::set<std::string> seen;
    for (const auto& uid : uids) {
        const int64_t run = run_row_or_throw(uid);
        first.bind(1, run);
        std::optional<std::string> at = first.step() ? std::optional<std::string>(first.text(0)) : std::nullopt;
        int64_t index = at ? first.int64(1) : 0;
        first.reset();
        while (at) {
            if (seen.insert(*at).second) found.emplace_back(index, found.size(), *at);
            next.bind(1, run).bind(2, *at);
            at = next.step() ? std::optional<std::string>(next.text(0)) : std::nullopt;
            index = at ? next.int64(1) : 0;
            next.reset();
        }
    }
    std::sort(found.begin(), found.end());
    std::vector<std::string> out;
    for (auto& f : found) out.push_back(std::move(std::get<2>(f)));
    return out;
}

std::vector<std::optional<SampleRecord>> Store::prompt_samples(const std::vector<std::string>& uids,
                                                               const std::string& prompt,
                                                               std::optional<int64_t> at_most) {
    // samples_by_prompt (run, prompt, iteration): the newest at or before at_most is one seek
    Statement s = db_.prepare(std::string("SELECT ") + kColumns +
                              " FROM samples WHERE run = ?1 AND prompt = ?2 AND iteration <= ?3 "
                              "ORDER BY iteration DESC, seq DESC LIMIT 1");
    std::vector<std::optional<SampleRecord>> out;
    for (const auto& uid : uids) {
        s.bind(1, run_row_or_throw(uid)).bind(2, prompt).bind(3, at_most.value_or(INT64_MAX));
        out.push_back(s.step() ? std::optional<SampleRecord>(read_sample(s, uid)) : std::nullopt);
        s.reset();
    }
    return out;
}

}  // namespace mwb::store
