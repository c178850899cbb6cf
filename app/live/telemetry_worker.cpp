#include "app/live/telemetry_worker.h"

#include "app/live/history_loader.h"
#include "mwb/ipc/error.h"
#include "mwb/ipc/follower.h"
#include "mwb/ipc/message.h"
#include "mwb/store/error.h"
#include "mwb/store/store.h"

#include <chrono>
#include <vector>

namespace mwb::app {

namespace {
using Clock = std::chrono::steady_clock;
}

TelemetryWorker::TelemetryWorker(AttachOptions options, std::shared_ptr<SeriesBuffer> buffer)
    : options_(std::move(options)), buffer_(std::move(buffer)) {}

void TelemetryWorker::notify() {
    if (buffer_->mark_pending()) emit dataArrived();
}

void TelemetryWorker::run() {
    LinkState link;
    link.endpoint = options_.endpoint;
    std::unique_ptr<store::Store> store;
    if (!options_.store_file.empty()) {
        try {
            std::filesystem::create_directories(options_.store_file.parent_path());
            store = std::make_unique<store::Store>(options_.store_file);
            link.recording = true;
            link.store_file = options_.store_file.string();
        } catch (const std::exception& e) {
            link.store_error = e.what();  // watch without recording
        }
    }
    buffer_->set_link(link);

    ipc::FollowerOptions fo;
    fo.endpoint = options_.endpoint;
    fo.curve = options_.curve;
    fo.resume_from = [this, &store, &link](const std::string& run_id) -> int64_t {
        if (!store) return 0;
        int64_t next = 0;
        try {
            if (loaded_.insert(run_id).second) {
                link.loading_history = true;
                buffer_->set_link(link);
                Update u = load_run_history(*store, run_id, next);
                link.loading_history = false;
                buffer_->add_history(std::move(u), next);
                buffer_->set_link(link);
                notify();
            }
            return store->next_seq(run_id);
        } catch (const std::exception& e) {
            link.store_error = e.what();
            return next;
        }
    };
    std::unique_ptr<ipc::Follower> follower;
    try {
        follower = std::make_unique<ipc::Follower>(std::move(fo));
    } catch (const std::exception& e) {
        link.error = e.what();
        buffer_->set_link(link);
        emit failed(QString::fromStdString(e.what()));
        emit finished();
        return;
    }
    link.connected = true;

    std::vector<ipc::Message> batch;
    store::LivenessTicker liveness(options_.gone_after_s);
    auto last_link = Clock::now() - std::chrono::seconds(1);
    while (!stop_.load()) {
        const auto deadline = Clock::now() + std::chrono::milliseconds(100);
        batch.clear();
        while (batch.size() < 50000 && !stop_.load()) {
            auto m = follower->next(batch.empty() ? std::chrono::milliseconds(50) : std::chrono::milliseconds(0));
            if (!m) break;
            batch.push_back(std::move(*m));
            if (Clock::now() > deadline) break;
        }
        if (!batch.empty()) {
            if (store) {
                try {
                    store::Store::Transaction t(*store);
                    for (const auto& m : batch) store->ingest(m);
                    t.commit();
                } catch (const std::exception& e) {
                    link.store_error = e.what();
                    link.recording = false;
                    store.reset();  // keep watching
                }
            }
            buffer_->add(batch);
            link.last_message = batch.back().time;
        }
        if (store) {  // a run whose process is gone without run.end must not stay "running" in the store
            try {
                const auto& run = follower->run_id();
                for (const auto& uid : liveness.tick(*store, run, !batch.empty() || follower->live(), ipc::unix_time()))
                    if (uid == run)
                        link.gone_reason =
                            "no message from the run for " + std::to_string(static_cast<int>(options_.gone_after_s)) + " s";
            } catch (const std::exception& e) {
                link.store_error = e.what();
            }
        }
        if (!batch.empty() || Clock::now() - last_link > std::chrono::milliseconds(250)) {
            const auto& s = follower->stats();
            link.live = follower->live();
            link.state = follower->state();
            link.publish = follower->publish_endpoint();
            link.snapshot = follower->snapshot_endpoint();
            link.control = follower->control_endpoint();
            link.delivered = s.delivered;
            link.from_snapshots = s.from_snapshots;
            link.from_files = s.from_files;
            link.gaps_filled = s.gaps;
            link.reconnects = s.reconnects;
            link.lost = s.unrecoverable;
            link.malformed = s.malformed;
            link.next_seq = follower->next_seq();
            buffer_->set_link(link);
            last_link = Clock::now();
            notify();
        }
    }
    emit finished();
}

}  // namespace mwb::app
