#include "recorder.h"

#include "mwb/ipc/error.h"
#include "mwb/ipc/follower.h"
#include "mwb/ipc/message.h"
#include "mwb/ipc/run_dir_log.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

namespace mwb::record {

namespace {

using Clock = std::chrono::steady_clock;

/// What one endpoint has delivered, for progress lines and --until-end.
struct Watch {
    std::unique_ptr<ipc::Follower> follower;
    std::string endpoint;
    uint64_t stored = 0, stored_reported = 0;
    int64_t iteration = -1;
    std::optional<double> loss;
    bool ended = false;  ///< run.end of the current run stored
    bool heard = false;  ///< a message arrived since the last liveness tick
};

void progress(const Watch& w) {
    const auto& s = w.follower->stats();
    std::printf("mwb-record: %s: %s seq %lld", w.endpoint.c_str(),
                w.follower->run_id().empty() ? "(waiting for the run)" : w.follower->run_id().c_str(),
                static_cast<long long>(w.follower->next_seq()) - 1);
    if (w.iteration >= 0) std::printf(", iteration %lld", static_cast<long long>(w.iteration));
    if (w.loss) std::printf(", loss %.4f", *w.loss);
    std::printf(", +%llu stored", static_cast<unsigned long long>(w.stored - w.stored_reported));
    if (s.gaps || s.reconnects || s.unrecoverable || s.malformed)
        std::printf(" (%llu gaps filled, %llu reconnects, %llu lost, %llu malformed)",
                    static_cast<unsigned long long>(s.gaps), static_cast<unsigned long long>(s.reconnects),
                    static_cast<unsigned long long>(s.unrecoverable), static_cast<unsigned long long>(s.malformed));
    std::printf("%s\n", w.follower->state() == "ended" ? " [run process ended]" : "");
    std::fflush(stdout);
}

}  // namespace

int follow(store::Store& store, const FollowOptions& o, const std::atomic<bool>& stop) {
    std::vector<Watch> watches;
    for (const auto& ep : o.endpoints) {
        ipc::FollowerOptions fo;
        fo.endpoint = ep;
        fo.curve = o.curve;
        // Resume where the store ends: a restarted recorder asks only for what it lacks.
        fo.resume_from = [&store](const std::string& run_id) { return store.next_seq(run_id); };
        Watch w;
        try {
            w.follower = std::make_unique<ipc::Follower>(std::move(fo));
        } catch (const ipc::Error& e) {
            throw UsageError(e.what());  // a malformed endpoint, plaintext off loopback, ...
        }
        w.endpoint = ep;
        std::error_code ec;
        if (!o.quiet && ep.find("://") == std::string::npos &&
            !std::filesystem::exists(std::filesystem::path(ep) / "telemetry.json", ec))
            std::printf("mwb-record: %s has no telemetry.json yet: waiting for a run to start there\n", ep.c_str());
        watches.push_back(std::move(w));
    }
    if (!o.quiet) {
        std::printf("mwb-record: recording %zu endpoint(s) into %s\n", watches.size(), store.file().c_str());
        std::fflush(stdout);
    }
    std::vector<std::pair<Watch*, ipc::Message>> batch;
    store::LivenessTicker liveness(o.gone_after_s);
    auto last_progress = Clock::now();
    const auto slice = std::chrono::milliseconds(std::max<int>(5, 100 / static_cast<int>(watches.size())));
    while (!stop.load()) {
        const auto batch_deadline = Clock::now() + std::chrono::milliseconds(100);
        while (Clock::now() < batch_deadline && batch.size() < 50000 && !stop.load()) {
            bool any = false;
            for (auto& w : watches) {
                for (int i = 0; i < 5000; ++i) {
                    auto m = w.follower->next(any ? std::chrono::milliseconds(0) : slice);
                    if (!m) break;
                    any = true;
                    w.heard = true;
                    batch.emplace_back(&w, std::move(*m));
                }
            }
            if (!any && !batch.empty()) break;
        }
        if (!batch.empty()) {
            store::Store::Transaction t(store);
            for (auto& [w, m] : batch) {
                if (store.ingest(m)) ++w->stored;
                if (m.topic == "step") {
                    w->iteration = m.body.value("iteration", w->iteration);
                    if (m.body.contains("lm_loss") && m.body["lm_loss"].is_number())
                        w->loss = m.body["lm_loss"].get<double>();
                } else if (m.topic == "run.start") {
                    w->ended = false;
                    if (!o.quiet)
                        std::printf("mwb-record: %s: run %s started (seq %lld)\n", w->endpoint.c_str(),
                                    m.run_id.c_str(), static_cast<long long>(m.seq));
                } else if (m.topic == "run.end") {
                    w->ended = true;
                    if (!o.quiet)
                        std::printf("mwb-record: %s: run %s ended: %s\n", w->endpoint.c_str(), m.run_id.c_str(),
                                    m.body.value("status", std::string("?")).c_str());
                }
            }
            t.commit();
            batch.clear();
            std::fflush(stdout);
        }
        // a run whose process is gone without run.end (killed, node lost) must not stay "running"
        for (auto& w : watches) {
            const bool heard = w.heard || w.follower->live();
            w.heard = false;
            for (const auto& uid : liveness.tick(store, w.follower->run_id(), heard, ipc::unix_time())) {
                for (auto& x : watches)
                    if (x.follower->run_id() == uid) x.ended = true;
                if (!o.quiet)
                    std::printf("mwb-record: run %s marked interrupted: no message for %.0f s\n", uid.c_str(),
                                o.gone_after_s);
            }
        }
        if (!o.quiet && Clock::now() - last_progress > std::chrono::duration<double>(o.progress_interval_s)) {
            for (auto& w : watches) {
                progress(w);
                w.stored_reported = w.stored;
            }
            last_progress = Clock::now();
        }
        // run.end is the last message of a run and delivery is in order: everything before it is stored.
        if (o.until_end && std::all_of(watches.begin(), watches.end(), [](const Watch& w) { return w.ended; })) break;
    }
    if (!o.quiet)
        for (auto& w : watches) progress(w);
    return 0;
}

void import_run_dir(store::Store& store, const std::string& run_dir, bool quiet) {
    std::size_t malformed = 0, total = 0, added = 0;
    std::string run_id;
    std::vector<ipc::Message> batch;
    auto flush = [&] {
        store::Store::Transaction t(store);
        for (const auto& m : batch) added += store.ingest(m) ? 1 : 0;
        t.commit();
        batch.clear();
    };
    total = ipc::for_each_run_dir_message(
        run_dir,
        [&](ipc::Message&& m) {
            if (run_id.empty()) run_id = m.run_id;
            batch.push_back(std::move(m));
            if (batch.size() >= 20000) flush();
        },
        &malformed);
    flush();
    if (!quiet) {
        std::printf("mwb-record: imported %s from %s: %zu messages, %zu new",
                    run_id.empty() ? "(no run)" : run_id.c_str(), run_dir.c_str(), total, added);
        if (malformed) std::printf(", %zu unreadable lines skipped", malformed);
        std::printf("\n");
        std::fflush(stdout);
    }
}

}  // namespace mwb::record
