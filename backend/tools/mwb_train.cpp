// mwb-train: one rank of a training run. Megatron-LM's defaults, overlaid with --config FILE.json or
// --preset NAME, then Megatron-LM-named flags; with no model or training flag at all, the embedded
// demo preset. See docs/config.md and `mwb-train --help`.
#include "backend/config/cli.h"
#include "backend/config/config_io.h"
#include "backend/config/validate.h"
#include "backend/data/data_sources.h"
#include "backend/generate/training_samples.h"
#include "mwb/kernels/device.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/ops.h"
#include "backend/parallel/parallel_context.h"
#include "mwb/planner/presets.h"
#include "presets.h"
#include "backend/telemetry/run_dir.h"
#include "backend/train/memory_fit.h"
#include "backend/train/trainer.h"
// ---- telemetry wiring (ipc) ----
#include "mwb/ipc/curve.h"
#include "mwb/ipc/error.h"
#include "mwb/ipc/private_file.h"
#include "mwb/ipc/requests.h"
#include "mwb/ipc/server.h"
// ---- end telemetry wiring ----

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <utility>

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop.store(true); }

/// Picks the device and, for cuda, this rank's GPU (-1 on the CPU): cuda needs CUDA kernels and a GPU
/// per rank on every node (gpu_of_rank); auto falls back to the CPU saying why once. Every rank takes
/// the same decision.
std::pair<std::string, int> choose_device(const std::string& requested, const mwb::World& world, bool quiet) {
    if (requested == "cpu") return {"cpu", -1};
    const mwb::DeviceReport r = mwb::probe_devices();
    const int gpu = mwb::gpu_of_rank(world.local_rank(), world.local_size(), r.cuda_devices,
                                     std::getenv("CUDA_VISIBLE_DEVICES") != nullptr);
    const bool usable_here = r.cuda_devices > 0 && r.cuda_kernels_built && gpu >= 0;
    const bool usable = world.all_agree(usable_here);
    const std::string why =
        r.cuda_devices == 0      ? r.reason
        : !r.cuda_kernels_built ? "this build has no CUDA kernels"
        : !usable_here          ? fmt::format("{} ranks run on this node and {} GPU(s) are visible to this one; each "
                                              "rank needs a GPU of its own (or a launcher that binds one to each rank "
                                              "through CUDA_VISIBLE_DEVICES)", world.local_size(), r.cuda_devices)
                                : "another rank's node has no usable GPU for it";
    if (requested == "cuda") {
        if (!usable) throw mwb::ConfigError({{"device", "device cuda: " + why}}, "--device");
        return {"cuda", gpu};
    }
    if (!usable && !quiet) spdlog::info("device auto: using the CPU ({})", why);
    if (usable && !quiet)
        spdlog::info("device auto: using the GPU ({})", gpu < static_cast<int>(r.names.size()) ? r.names[gpu] : "?");
    return usable ? std::pair<std::string, int>{"cuda", gpu} : std::pair<std::string, int>{"cpu", -1};
}

/// Where the configuration starts: --config FILE or --preset NAME over Megatron-LM's defaults;
/// with neither and no model or training flag, the embedded demo preset (so `mwb-train` alone runs
/// the demo); otherwise Megatron-LM's defaults, which leave the sizes, lr and train_iters to the user.
mwb::Config base_config(const std::string& file, const std::string& preset, bool model_flags, bool quiet);
/// Before anything is allocated or created: the planner's estimate of this rank's memory against the
/// GPU's free memory, or against the host memory the node's ranks share. False (the numbers printed by
/// the node's first rank, or each GPU's rank) when it cannot fit on some rank; every rank agrees.
bool memory_fits(const mwb::Config& cfg, const mwb::World& world) {
    const mwb::PlannedMemory need = mwb::planned_rank_memory(cfg, world.size(), world.rank());
    const std::string who = world.size() > 1 ? fmt::format("rank {}", world.rank()) : std::string("this run");
    std::string problem;
    if (cfg.runtime.device == "cuda") {
        const mwb::device::MemoryInfo gpu = mwb::device::cuda_memory_info();
        if (need.peak > static_cast<double>(gpu.free_bytes))
            problem = fmt::format("{} needs {} by the planner's estimate ({}), and its GPU has {} free of {}", who,
                                  mwb::format_memory(need.peak), need.detail,
                                  mwb::format_memory(static_cast<double>(gpu.free_bytes)),
                                  mwb::format_memory(static_cast<double>(gpu.total_bytes)));
    } else {
        const double node_need = world.node_sum(need.peak);
        const mwb::HostMemory host = mwb::host_memory_available();
        if (host.available > 0 && node_need > static_cast<double>(host.available) && world.local_rank() == 0)
            problem = fmt::format(
                "{} needs {} by the planner's estimate ({}){}, and the host has {} available ({})", who,
                mwb::format_memory(need.peak), need.detail,
                world.local_size() > 1
                    ? fmt::format("; the {} ranks on this node need {}", world.local_size(), mwb::format_memory(node_need))
                    : std::string(),
                mwb::format_memory(static_cast<double>(host.available)), host.source);
        else if (host.available > 0 && node_need > static_cast<double>(host.available))
            problem = "-";  // the node's first rank says why
    }
    if (!problem.empty() && problem != "-")
        std::cerr << "mwb-train: invalid configuration (memory): the model does not fit: " << problem
                  << ". Use more tensor or pipeline parallelism, recomputation or a smaller model.\n";
    return world.all_agree(problem.empty());
}

/// --save must be writable before the first iteration, not found out at the first checkpoint. Rank 0
/// checks (the ranks share the file system); every rank gets its verdict.
void check_save_dir(const mwb::Config& cfg, const mwb::World& world) {
    std::string problem;
    if (world.rank() == 0 && !cfg.checkpoint.save.empty()) {
        const mwb::fs::path dir = cfg.checkpoint.save;
        std::error_code ec;
        mwb::fs::create_directories(dir, ec);
        if (ec) problem = fmt::format("save: cannot create '{}': {}", dir.string(), ec.message());
        else if (::access(dir.c_str(), W_OK | X_OK) != 0)
            problem = fmt::format("save: '{}' is not writable: {}", dir.string(), std::strerror(errno));
    }
    if (!world.all_agree(problem.empty())) {
        if (problem.empty()) problem = "save: rank 0 cannot write the checkpoint directory";
        throw mwb::ConfigError({{"save", problem}}, "--save");
    }
}

/// Runs `f`, turning an error into a configuration error of `field` (exit status 2: nothing started).
template <typename F>
auto as_config_error(const char* field, F&& f) {
    try {
        return f();
    } catch (const mwb::ConfigError&) {
        throw;
    } catch (const mwb::Error& e) {
        throw mwb::ConfigError({{field, e.what()}}, field);
    }
}

mwb::Config base_config(const std::string& file, const std::string& preset, bool model_flags, bool quiet) {
    if (!file.empty() && !preset.empty())
        throw mwb::ConfigError({{"config", "give --config or --preset, not both"}}, "command line");
    if (!file.empty()) return mwb::load_config_file(file);
    if (preset == "tiny-cpu-demo" || (preset.empty() && !model_flags)) {
        if (preset.empty() && !quiet)
            spdlog::info("no model or training flags: running the demo preset tiny-cpu-demo (--preset NAME picks "
                         "another; Megatron-LM flags start from Megatron-LM's defaults)");
        return mwb::parse_config(mwb::presets::kTinyCpuDemo, "the embedded demo preset");
    }
    if (!preset.empty()) return as_config_error("preset", [&] { return mwb::planner::load_preset(preset); });
    return mwb::Config{};
}

}  // namespace

int main(int argc, char** argv) {
    // One process per rank: under mpirun/srun every rank runs this main; rank 0 prints and writes
    // the run directory. Every rank validates the same configuration, so all stop together.
    mwb::World world(&argc, &argv);
    const bool leader = world.rank() == 0;
    spdlog::set_pattern("[%H:%M:%S] %v");
    if (!leader) spdlog::set_level(spdlog::level::warn);
    CLI::App app{"mwb-train: train a GPT model (one process per rank). Flags use Megatron-LM's names; "
                 "see docs/config.md.",
                 "mwb-train"};
    app.set_help_flag("-h,--help", "Print this help and exit");
    std::string config_file, preset;
    bool print_config = false;
    app.add_option("--config", config_file, "Configuration JSON over Megatron-LM's defaults");
    app.add_option("--preset", preset,
                   "A preset by name (resources/presets/NAME.json, e.g. tiny-cpu-demo, gpt3-125m); flags override it");
    app.add_flag("--print-config", print_config, "Print the resolved, validated configuration as JSON and exit");
    app.add_flag_callback("--config-reference", [] {
        std::cout << mwb::config_reference_markdown() << mwb::megatron_flags_markdown();
        std::exit(0);
    }, "Print the reference table of every configuration field (docs/config.md) and exit");
    app.add_flag_callback("--version", [] {
        std::cout << "mwb-train " << MWB_VERSION << "\n";
        std::exit(0);
    }, "Print the version and exit");
    const mwb::ConfigFlags flags(app);
    if (const auto code = mwb::parse_command_line(app, argc, argv, leader)) return *code;

    try {
        mwb::Config cfg = base_config(config_file, preset, flags.sets_model_or_training(), print_config || !leader);
        flags.apply(cfg);
        const std::vector<mwb::RecordedFlag> recorded = flags.recorded();
        for (const auto& r : recorded) {  // --print-config keeps stdout for the JSON
            if (!leader) break;
            if (print_config) std::cerr << "mwb-train: " << r.flag << ": accepted, no effect here: " << r.note << "\n";
            else spdlog::info("{}: accepted, no effect here: {}", r.flag, r.note);
        }
        const auto [device, gpu] = choose_device(cfg.runtime.device, world, print_config || !leader);
        cfg.runtime.device = device;
        if (gpu >= 0) mwb::device::set_device(gpu);
        if (cfg.runtime.threads > 0) mwb::ops::set_num_threads(cfg.runtime.threads);
        const auto tokenizer = as_config_error("tokenizer_type", [&] { return mwb::data::make_tokenizer(cfg.data, cfg.model); });
        for (const std::string& note : mwb::resolve(cfg, world.size(), tokenizer->vocab_size())) {
            if (print_config) {  // stdout carries the JSON alone
                if (leader) std::cerr << "mwb-train: " << note << "\n";
            } else {
                spdlog::warn("{}", note);
            }
        }
        mwb::check_config(cfg, world.size());
        if (cfg.sampling.sample_interval > 0 && !cfg.sampling.sample_prompts.empty())
            mwb::generate::read_sample_prompts(cfg.sampling.sample_prompts);  // a bad file is a config error (exit 2)
        if (print_config) {
            if (!leader) return 0;
            std::cout << mwb::to_json(cfg).dump(2) << "\n";
            return 0;
        }
        if (!memory_fits(cfg, world)) return 2;
        check_save_dir(cfg, world);

        // As Megatron-LM (get_train_valid_test_num_samples): enough training samples for every
        // iteration, fresh validation samples for every evaluation (each eval_interval and once after
        // training), one evaluation's worth of test samples.
        const auto& t = cfg.training;
        const int64_t train_samples = t.train_samples > 0 ? t.train_samples : t.train_iters * t.global_batch_size;
        const int64_t evaluations = (cfg.data.eval_interval > 0 ? t.train_iters / cfg.data.eval_interval : 0) + 1;
        const int64_t valid_samples = evaluations * cfg.data.eval_iters * t.global_batch_size;
        const int64_t test_samples = cfg.data.eval_iters * t.global_batch_size;
        auto sources = as_config_error("data_path", [&] {
            return mwb::data::make_data_sources(cfg, *tokenizer, train_samples, valid_samples, test_samples);
        });
        mwb::TrainerInputs in;
        in.config = cfg;
        in.train = std::move(sources.train);
        in.valid = std::move(sources.valid);
        in.test = std::move(sources.test);
        in.data_description = sources.description;
        for (const auto& r : recorded) in.accepted_flags.push_back({{"flag", r.flag}, {"values", r.values}, {"note", r.note}});
        in.stop_requested = &g_stop;
        // SIGUSR1 is what Slurm sends before the time limit (#SBATCH --signal=USR1@N) and what
        // mpirun forwards to every rank: checkpoint at the next iteration boundary and exit (130).
        for (const int sig : {SIGINT, SIGTERM, SIGUSR1}) std::signal(sig, on_signal);

        world.start_watchdog(cfg.parallel.distributed_timeout_minutes * 60);
        mwb::ParallelContext par(world, cfg.parallel);
        std::unique_ptr<mwb::RunDir> run_dir = leader ? std::make_unique<mwb::RunDir>(cfg.logging.run_dir, "gpt") : nullptr;
        if (run_dir)  // the watchdog's diagnosis is recorded before it aborts every rank
            world.set_watchdog_report([dir = run_dir.get()](const std::string& why) {
                dir->publish("event", {{"kind", "watchdog_timeout"}, {"reason", why}});
                dir->publish("run.end", {{"status", "failed"}, {"reason", why}});
            });
        // ---- telemetry wiring (ipc) ----
        // Rank 0 publishes every run-directory message over ZeroMQ (PUB, plus "everything since seq N"
        // for late subscribers) and takes control requests (docs/protocol.md). The bound endpoints are
        // printed and written to <run_dir>/telemetry.json; plaintext control needs <run_dir>/control.token.
        class WireControl final : public mwb::ControlSource {
        public:
            explicit WireControl(mwb::ipc::TelemetryServer& server) : server_(server) {}
            std::optional<mwb::ControlRequest> poll() override {
                const auto c = server_.poll_control();  // the server validated action and authentication
                if (!c) return std::nullopt;
                const auto action = mwb::parse_control_action(c->action).value_or(mwb::ControlAction::Status);
                return mwb::ControlRequest{action, c->id};
            }
            void reply(const mwb::ControlRequest& r, const nlohmann::json& result) override {
                server_.reply_control(r.id, result);
            }

        private:
            mwb::ipc::TelemetryServer& server_;
        };
        std::unique_ptr<mwb::ipc::TelemetryServer> telemetry;
        std::unique_ptr<WireControl> wire_control;
        if (leader && !cfg.telemetry.telemetry_endpoint.empty()) {
            const auto& l = cfg.telemetry;
            mwb::ipc::ServerOptions o;
            o.run_id = run_dir->run_id();
            o.run_dir = run_dir->path();
            o.publish_endpoint = l.telemetry_endpoint;
            o.snapshot_endpoint = l.telemetry_snapshot_endpoint;
            o.control_endpoint = l.control_endpoint;
            const auto field_error = [&world](const char* field, const mwb::ipc::Error& e) {
                if (world.size() > 1) {  // only rank 0 binds: the others must not wait for it in a collective
                    std::cerr << "mwb-train: invalid configuration (" << field << "): " << e.what() << "\n";
                    world.abort(2);
                }
                return mwb::ConfigError({{field, e.what()}}, field);
            };
            try {
                if (!l.curve_secret_key_file.empty())
                    o.curve.emplace().server = mwb::ipc::load_secret_key_file(l.curve_secret_key_file);
            } catch (const mwb::ipc::Error& e) {
                throw field_error("curve_secret_key_file", e);
            }
            try {
                if (o.curve) o.curve->allowed_clients = mwb::ipc::load_public_keys(l.curve_client_keys);
            } catch (const mwb::ipc::Error& e) {
                throw field_error("curve_client_keys", e);
            }
            try {
                if (!o.curve && !o.control_endpoint.empty())
                    o.control_token = mwb::ipc::create_token_file(run_dir->path() / mwb::ipc::kControlTokenFile);
                telemetry = std::make_unique<mwb::ipc::TelemetryServer>(std::move(o));
            } catch (const mwb::ipc::Error& e) {
                throw field_error("telemetry_endpoint", e);
            }
            mwb::write_file_atomic(run_dir->path() / mwb::ipc::kTelemetryInfoFile, telemetry->info().dump(2) + "\n");
            run_dir->set_forwarder(
                [t = telemetry.get()](std::string_view topic, const std::string& json) { t->publish(topic, json); });
            if (!telemetry->control_endpoint().empty()) {
                wire_control = std::make_unique<WireControl>(*telemetry);
                in.control = wire_control.get();
            }
            spdlog::info("telemetry: {} | snapshots {} | control {}", telemetry->publish_endpoint(),
                         telemetry->snapshot_endpoint(),
                         telemetry->control_endpoint().empty() ? std::string("off") : telemetry->control_endpoint());
        }
        // ---- end telemetry wiring ----
        const mwb::RunStatus status = mwb::train(std::move(in), run_dir.get(), &par);
        if (leader) {
            if (status == mwb::RunStatus::Finished) spdlog::info("done; run directory {}", run_dir->path().string());
            else spdlog::warn("stopped early; run directory {}", run_dir->path().string());
        }
        return static_cast<int>(status);
    } catch (const mwb::ConfigError& e) {
        // Every rank reached the same verdict from the same inputs: only rank 0 says it.
        if (leader) std::cerr << "mwb-train: " << e.what() << "\n";
        return 2;
    } catch (const mwb::Error& e) {
        std::cerr << "mwb-train: error" << (world.size() > 1 ? fmt::format(" on rank {}", world.rank()) : "") << ": "
                  << e.what() << "\n";
        if (!e.where().empty()) std::cerr << "  (raised at " << e.where() << ")\n";
        if (world.size() > 1) world.abort(1);  // the other ranks may be waiting in a collective
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "mwb-train: error: " << e.what() << "\n";
        if (world.size() > 1) world.abort(1);
        return 1;
    }
}
