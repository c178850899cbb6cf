// mwb-record: the headless recorder. Follows live runs into the SQLite history, imports finished run
// directories, makes CURVE key pairs and sends control requests (docs/protocol.md, docs/store.md).
//   mwb-record [--store FILE] ENDPOINT|RUN_DIR...      follow until SIGINT/SIGTERM (or --until-end)
//   mwb-record import [--store FILE] RUN_DIR...        load finished runs
//   mwb-record keygen NAME                             NAME.key (public), NAME.key_secret (0600)
//   mwb-record control RUN_DIR|ENDPOINT ACTION         pause | resume | checkpoint | stop | status
//   mwb-record runs [--store FILE]                     list the stored runs
// Exit status: 0 done, 1 runtime error (store, network, a refused request), 2 usage error.
#include "mwb/ipc/control_client.h"
#include "mwb/ipc/curve.h"
#include "mwb/ipc/error.h"
#include "mwb/ipc/private_file.h"
#include "mwb/store/error.h"
#include "recorder.h"

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <iostream>

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) {
    g_stop.store(true);
}

using mwb::record::UsageError;

std::optional<mwb::ipc::ClientCurve> client_curve(const std::string& key_file, const std::string& server_key) {
    if (key_file.empty()) {
        if (!server_key.empty()) throw UsageError("--server-key needs --curve-key (this client's NAME.key_secret)");
        return std::nullopt;
    }
    mwb::ipc::ClientCurve c;
    try {
        c.client = mwb::ipc::load_secret_key_file(key_file);
        if (!server_key.empty()) c.server_public_key = mwb::ipc::load_public_key(server_key);
    } catch (const mwb::ipc::Error& e) {
        throw UsageError(e.what());
    }
    return c;
}

std::string describe(const mwb::store::RunSummary& r) {
    char loss[32] = "-";
    if (r.last_loss) std::snprintf(loss, sizeof loss, "%.4f", *r.last_loss);
    std::string s = r.uid + "  " + r.status + "  iteration " + std::to_string(r.iteration);
    if (r.train_iters) s += "/" + std::to_string(*r.train_iters);
    s += "  loss " + std::string(loss) + "  seq <" + std::to_string(r.next_seq);
    for (const auto& t : r.tags) s += "  #" + t;
    return s;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"mwb-record: record live training runs (ZeroMQ) into the SQLite run history", "mwb-record"};
    std::string store_file = mwb::store::default_store_path().string();
    std::string curve_key, server_key;
    std::vector<std::string> endpoints;
    bool until_end = false, quiet = false;
    double gone_after_s = mwb::store::Store::kDefaultGoneAfterS;
    app.add_option("--store", store_file, "History store (SQLite)")->capture_default_str();
    app.add_option("--curve-key", curve_key, "This client's CURVE key pair (NAME.key_secret) for CURVE runs");
    app.add_option("--server-key", server_key,
                   "The run's CURVE public key (a Z85 key or NAME.key); run directories name it");
    app.add_flag("--until-end", until_end, "Exit once every followed run has published run.end");
    app.add_flag("-q,--quiet", quiet, "No progress lines");
    app.add_option("--gone-after", gone_after_s,
                   "Seconds without a message or heartbeat after which a running run is marked interrupted")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("endpoints", endpoints, "tcp://HOST:PORT of a run's telemetry (PUB) socket, or its run directory");

    auto* import = app.add_subcommand("import", "Load finished run directories (metrics.jsonl, events.jsonl)");
    std::vector<std::string> import_dirs;
    import->add_option("run_dirs", import_dirs, "Run directories")->required();

    auto* keygen = app.add_subcommand("keygen", "Make a CURVE key pair: NAME.key (public) and NAME.key_secret (0600)");
    std::string key_name;
    keygen->add_option("name", key_name, "File name prefix, e.g. keys/alice")->required();

    auto* control = app.add_subcommand("control", "Send pause | resume | checkpoint | stop | status to a run");
    std::string target, action, token_file;
    double timeout_s = 60;
    control->add_option("target", target, "The run directory (or its control endpoint, with --token-file)")->required();
    control->add_option("action", action, "pause | resume | checkpoint | stop | status")
        ->required()
        ->check(CLI::IsMember({"pause", "resume", "checkpoint", "stop", "status"}));
    control->add_option("--token-file", token_file,
                        "Control token file (plaintext runs; default <run_dir>/control.token)");
    control->add_option("--timeout", timeout_s, "Seconds to wait for the reply")->capture_default_str();

    auto* runs = app.add_subcommand("runs", "List the runs in the store, newest first");
    std::string filter_text;
    runs->add_option("--filter", filter_text, "Only runs whose id, name or notes contain this");
    for (auto* sub : {import, keygen, control, runs}) sub->fallthrough();  // --store, --curve-key after the name
    app.require_subcommand(0, 1);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);  // prints help or the problem
        return code == 0 ? 0 : 2;
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0);

    try {
        if (*keygen) {
            const auto keys = mwb::ipc::generate_key_pair();
            const auto [pub, sec] = mwb::ipc::write_key_files(key_name, keys);
            std::printf("public key %s\n  %s (give it to the other side)\n  %s (keep it, mode 0600)\n",
                        keys.public_key.c_str(), pub.c_str(), sec.c_str());
            return 0;
        }
        if (*control) {
            const auto curve = client_curve(curve_key, server_key);
            const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
            std::optional<mwb::ipc::ControlClient> client;
            if (target.find("://") != std::string::npos) {
                mwb::ipc::ControlClientOptions o;
                o.endpoint = target;
                o.curve = curve;
                if (!curve) {
                    if (token_file.empty())
                        throw UsageError("control " + target + ": plaintext control needs --token-file");
                    o.token = mwb::ipc::read_token_file(token_file);
                }
                client.emplace(std::move(o));
            } else {
                client.emplace(mwb::ipc::ControlClient::for_run_dir(target, curve));
            }
            const auto reply = client->request(action, timeout);
            std::cout << reply.dump() << "\n";
            return reply.value("ok", false) ? 0 : 1;
        }
        mwb::store::Store store(store_file);
        if (*import) {
            for (const auto& dir : import_dirs) mwb::record::import_run_dir(store, dir, quiet);
            return 0;
        }
        if (*runs) {
            mwb::store::RunFilter f;
            f.text = filter_text;
            for (const auto& r : store.runs(f)) std::cout << describe(r) << "\n";
            return 0;
        }
        if (endpoints.empty()) throw UsageError("give at least one endpoint or run directory to follow (see --help)");
        mwb::record::FollowOptions fo;
        fo.endpoints = endpoints;
        fo.curve = client_curve(curve_key, server_key);
        fo.until_end = until_end;
        fo.quiet = quiet;
        fo.gone_after_s = gone_after_s;
        std::signal(SIGINT, on_signal);
        std::signal(SIGTERM, on_signal);
        return mwb::record::follow(store, fo, g_stop);
    } catch (const UsageError& e) {
        std::cerr << "mwb-record: " << e.what() << "\n";
        return 2;
    } catch (const mwb::ipc::Error& e) {
        std::cerr << "mwb-record: " << e.what() << "\n";
        return 1;
    } catch (const mwb::store::Error& e) {
        std::cerr << "mwb-record: " << e.what() << "\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "mwb-record: error: " << e.what() << "\n";
        return 1;
    }
}
