#include "backend/config/cli.h"

#include <array>

namespace mwb {

namespace {

// Megatron-LM flags (megatron/training/arguments.py at the commit named in docs/config.md) that are not a
// field of their own name. Every row is one flag; docs/config.md lists them.
#define ALIAS(FLAG, NARGS, FIELD, VALUE) MegatronFlag{FLAG, FlagKind::Alias, NARGS, FIELD, VALUE, ""}
#define NO_EFFECT(FLAG, NARGS, NOTE) MegatronFlag{FLAG, FlagKind::NoEffect, NARGS, "", "", NOTE}
#define ONLY_DEFAULT(FLAG, VALUE, NOTE) MegatronFlag{FLAG, FlagKind::OnlyDefault, 1, "", VALUE, NOTE}
#define UNSUPPORTED(FLAG, NARGS, NOTE) MegatronFlag{FLAG, FlagKind::Unsupported, NARGS, "", "", NOTE}

constexpr const char* kKernels = "this engine has one implementation of each op (docs/architecture.md): nothing to select";
constexpr const char* kWandb = "Weights & Biases is not contacted; the same numbers are in the run directory "
                               "(metrics.jsonl) and, with --tensorboard-dir, in TensorBoard event files";

const auto kMegatronFlags = std::to_array<MegatronFlag>({
    // destinations that differ from the flag (store_false flags, second names)
    ALIAS("--disable-bias-linear", 0, "add_bias_linear", "false"),
    ALIAS("--no-log-loss-scale-to-tensorboard", 0, "log_loss_scale_to_tensorboard", "false"),
    ALIAS("--persistent-save-interval", 1, "save_interval", ""),
    // kernel and backend selection: the math is the same
    NO_EFFECT("--use-flash-attn", 0, kKernels),
    NO_EFFECT("--transformer-impl", 1, kKernels),
    NO_EFFECT("--use-mcore-models", 0, "the model is always the one of megatron/core (GPTModel)"),
    NO_EFFECT("--no-masked-softmax-fusion", 0, kKernels),
    NO_EFFECT("--masked-softmax-fusion", 0, kKernels),
    NO_EFFECT("--no-bias-gelu-fusion", 0, kKernels),
    NO_EFFECT("--bias-gelu-fusion", 0, kKernels),
    NO_EFFECT("--no-bias-swiglu-fusion", 0, kKernels),
    NO_EFFECT("--no-bias-dropout-fusion", 0, kKernels),
    NO_EFFECT("--no-rope-fusion", 0, kKernels),
    NO_EFFECT("--no-gradient-accumulation-fusion", 0, kKernels),
    NO_EFFECT("--no-persist-layer-norm", 0, kKernels),
    NO_EFFECT("--cross-entropy-loss-fusion", 0, kKernels),
    NO_EFFECT("--cross-entropy-fusion-impl", 1, kKernels),
    NO_EFFECT("--overlap-grad-reduce", 0, "gradients are reduced after the backward pass, in buckets"),
    NO_EFFECT("--overlap-param-gather", 0, "the distributed optimizer gathers the weights after its step"),
    NO_EFFECT("--calculate-per-token-loss", 0,
              "every token of every micro-batch counts (no loss mask), so the per-token and per-micro-batch "
              "averages are the same number"),
    // memory management, data loading, profiling: no effect on the result
    NO_EFFECT("--manual-gc", 0, "no garbage collector here"),
    NO_EFFECT("--manual-gc-interval", 1, "no garbage collector here"),
    NO_EFFECT("--empty-unused-memory-level", 1, "the engine's arena allocator keeps no unused cache"),
    NO_EFFECT("--num-workers", 1, "samples are read from memory-mapped files on the training thread"),
    NO_EFFECT("--no-mmap-bin-files", 0, ".bin files are always memory-mapped"),
    NO_EFFECT("--no-create-attention-mask-in-dataloader", 0, "the causal mask is applied inside attention"),
    NO_EFFECT("--dataloader-type", 1, "samples are read in Megatron-LM's single (sequential) order"),
    NO_EFFECT("--num-dataset-builder-threads", 1, "sample indices are built by one thread and cached"),
    NO_EFFECT("--profile", 0, "no profiler hooks; per-phase times are in metrics.jsonl"),
    NO_EFFECT("--profile-step-start", 1, "no profiler hooks; per-phase times are in metrics.jsonl"),
    NO_EFFECT("--profile-step-end", 1, "no profiler hooks; per-phase times are in metrics.jsonl"),
    NO_EFFECT("--use-pytorch-profiler", 0, "no profiler hooks; per-phase times are in metrics.jsonl"),
    NO_EFFECT("--timing-log-level", 1, "per-phase times are always in metrics.jsonl"),
    NO_EFFECT("--log-params-norm", 0, "not computed"),
    NO_EFFECT("--log-num-zeros-in-grad", 0, "not computed"),
    NO_EFFECT("--log-progress", 0, "progress is in the run directory"),
    NO_EFFECT("--tensorboard-queue-size", 1, "event files are written and flushed at each log interval"),
    NO_EFFECT("--log-world-size-to-tensorboard", 0, "the world size is in run.json"),
    NO_EFFECT("--ckpt-format", 1, "checkpoints have this engine's format (docs/checkpoint.md), resharded on load"),
    NO_EFFECT("--auto-detect-ckpt-format", 0, "checkpoints have this engine's format (docs/checkpoint.md)"),
    NO_EFFECT("--async-save", 0, "checkpoints are written synchronously"),
    NO_EFFECT("--ckpt-fully-parallel-load", 0, "each rank reads the slices it needs"),
    NO_EFFECT("--no-ckpt-fully-parallel-save", 0, "each shard is written by its data-parallel rank 0"),
    NO_EFFECT("--use-checkpoint-args", 0, "the checkpoint's model keys are compared with this run's instead"),
    NO_EFFECT("--exit-signal-handler", 0, "SIGINT and SIGTERM always stop after the iteration with a checkpoint"),
    NO_EFFECT("--override-opt-param-scheduler", 0, "the schedule always follows this run's configuration"),
    NO_EFFECT("--override-opt_param-scheduler", 0, "the schedule always follows this run's configuration"),
    NO_EFFECT("--wandb-project", 1, kWandb),
    NO_EFFECT("--wandb-exp-name", 1, kWandb),
    NO_EFFECT("--wandb-save-dir", 1, kWandb),
    NO_EFFECT("--wandb-entity", 1, kWandb),
    // Megatron-LM's default is the only value this engine has
    ONLY_DEFAULT("--context-parallel-size", "1", "context parallelism"),
    ONLY_DEFAULT("--expert-model-parallel-size", "1", "mixture-of-experts models"),
    // they change the math: refused rather than ignored
    UNSUPPORTED("--apply-layernorm-1p", 0, "zero-centred norm weights"),
    UNSUPPORTED("--null-tokenizer-pad-id", 1, "a pad id of its own for the NullTokenizer"),
    UNSUPPORTED("--decoupled-lr", 1, "a separate learning rate for the embedding and output layer"),
    UNSUPPORTED("--decoupled-min-lr", 1, "a separate learning rate for the embedding and output layer"),
    UNSUPPORTED("--grad-reduce-in-bf16", 0, "gradients are reduced in fp32 (bf16 accumulates in fp32)"),
    UNSUPPORTED("--fp8-format", 1, "fp8 training"),
    UNSUPPORTED("--fp8-amax-history-len", 1, "fp8 training"),
    UNSUPPORTED("--fp8-amax-compute-algo", 1, "fp8 training"),
    UNSUPPORTED("--fp8-param-gather", 0, "fp8 training"),
    UNSUPPORTED("--fp4-format", 1, "fp4 training"),
    UNSUPPORTED("--optimizer", 1, "the optimizer is AdamW"),
    UNSUPPORTED("--use-precision-aware-optimizer", 0, "moments are kept in fp32"),
    UNSUPPORTED("--qk-layernorm", 0, "layer norms on queries and keys"),
    UNSUPPORTED("--num-experts", 1, "mixture-of-experts models"),
    UNSUPPORTED("--moe-router-topk", 1, "mixture-of-experts models"),
    UNSUPPORTED("--use-checkpoint-opt-param-scheduler", 0, "the schedule always follows this run's configuration"),
    UNSUPPORTED("--num-layers-per-virtual-pipeline-stage-first", 1, "uneven virtual stages"),
    UNSUPPORTED("--decoder-first-pipeline-num-layers", 1, "uneven pipeline stages"),
    UNSUPPORTED("--decoder-last-pipeline-num-layers", 1, "uneven pipeline stages"),
    UNSUPPORTED("--account-for-embedding-in-pipeline-split", 0, "uneven pipeline stages"),
    UNSUPPORTED("--account-for-loss-in-pipeline-split", 0, "uneven pipeline stages"),
    UNSUPPORTED("--eod-mask-loss", 0, "a loss mask on end-of-document tokens"),
    UNSUPPORTED("--reset-position-ids", 0, "position ids restarting at each document"),
    UNSUPPORTED("--reset-attention-mask", 0, "attention masks per document"),
    UNSUPPORTED("--train-data-path", -1, "separate train/valid/test datasets; use --data-path and --split"),
    UNSUPPORTED("--valid-data-path", -1, "separate train/valid/test datasets; use --data-path and --split"),
    UNSUPPORTED("--test-data-path", -1, "separate train/valid/test datasets; use --data-path and --split"),
    UNSUPPORTED("--eval-global-batch-size", 1, "evaluation uses global_batch_size"),
    UNSUPPORTED("--eval-micro-batch-size", 1, "evaluation uses micro_batch_size"),
    UNSUPPORTED("--full-validation", 0, "validation reads eval_iters global batches"),
    UNSUPPORTED("--skip-train", 0, "evaluation without training"),
    UNSUPPORTED("--iterations-to-skip", -1, "skipping iterations"),
});

#undef ALIAS
#undef NO_EFFECT
#undef ONLY_DEFAULT
#undef UNSUPPORTED

bool is_model_or_training(std::string_view group) {
    return group == "model" || group == "parallel" || group == "training" || group == "data";
}

std::string joined(const std::vector<std::string>& values) {
    std::string s;
    for (const auto& v : values) s += (s.empty() ? "" : " ") + v;
    return s;
}

}  // namespace

std::span<const MegatronFlag> megatron_flags() { return kMegatronFlags; }

std::string megatron_flags_markdown() {
    std::string md = "\n### Megatron-LM flags that are not fields\n\n| flag | here |\n| --- | --- |\n";
    for (const MegatronFlag& m : kMegatronFlags) {
        std::string what;
        switch (m.kind) {
        case FlagKind::Alias:
            what = fmt::format("sets `{}`{}", m.field, m.value.empty() ? "" : fmt::format(" = {}", m.value));
            break;
        case FlagKind::NoEffect: what = fmt::format("accepted and recorded, no effect: {}", m.note); break;
        case FlagKind::OnlyDefault:
            what = fmt::format("accepted as {} (Megatron-LM's default); another value: not supported yet ({})", m.value,
                               m.note);
            break;
        case FlagKind::Unsupported: what = fmt::format("refused, not supported yet: {}", m.note); break;
        }
        md += fmt::format("| `{}`{} | {} |\n", m.flag, m.nargs == 0 ? "" : m.nargs < 0 ? " ..." : " X", what);
    }
    return md;
}

ConfigFlags::ConfigFlags(CLI::App& app) {
    // Every configuration field is a flag: --num-layers 4, --bf16, --bf16=false, --data-path 0.5 a 0.5 b.
    for (const Field& f : config_fields()) {
        auto* opt = app.add_option(f.flag())->description(std::string(f.help))->group(std::string(f.group));
        if (f.type_name() == "bool") opt->expected(0, 1);
        else if (f.type_name() == "list") opt->expected(1, -1);
        else opt->expected(1);
        // As argparse (Megatron-LM's): a flag given twice takes its last value.
        if (f.type_name() != "list") opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        // Values such as "-1" or "0.3" are values, not flags.
        opt->allow_extra_args(f.type_name() == "list");
        fields_.emplace_back(&f, opt);
    }
    for (const MegatronFlag& m : kMegatronFlags) {
        std::string help;
        switch (m.kind) {
        case FlagKind::Alias: help = fmt::format("Megatron-LM's spelling: sets {}{}", m.field,
                                                 m.value.empty() ? "" : fmt::format(" = {}", m.value)); break;
        case FlagKind::NoEffect: help = fmt::format("Accepted, no effect: {}.", m.note); break;
        case FlagKind::OnlyDefault: help = fmt::format("Only {} (Megatron-LM's default): {}.", m.value, m.note); break;
        case FlagKind::Unsupported: help = fmt::format("Not supported yet ({}).", m.note); break;
        }
        auto* opt = app.add_option(std::string(m.flag))->description(help)->group("Megatron-LM compatibility");
        if (m.nargs == 0) opt->expected(0, 1);
        else if (m.nargs < 0) opt->expected(1, -1);
        else opt->expected(1);
        if (m.nargs >= 0) opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        megatron_.emplace_back(&m, opt);
    }
}

bool ConfigFlags::sets_model_or_training() const {
    for (const auto& [field, opt] : fields_)
        if (opt->count() > 0 && is_model_or_training(field->group)) return true;
    for (const auto& [m, opt] : megatron_)
        if (opt->count() > 0 && m->kind == FlagKind::Alias)
            if (const Field* f = find_config_field(m->field); f && is_model_or_training(f->group)) return true;
    return false;
}

void ConfigFlags::apply(Config& config) const {
    std::vector<ConfigIssue> issues;
    const auto set = [&](const Field& field, std::string_view value) {
        try {
            set_field(config, field, value);
        } catch (const ConfigError& e) {
            for (const auto& i : e.issues()) issues.push_back(i);
        }
    };
    for (const auto& [field, opt] : fields_) {
        if (opt->count() == 0) continue;
        if (field->type_name() == "list") std::get<std::vector<std::string>*>(field->ref(config))->clear();
        const auto& results = opt->results();
        if (results.empty()) set(*field, "");
        for (const std::string& v : results) set(*field, v);
    }
    for (const auto& [m, opt] : megatron_) {
        if (opt->count() == 0) continue;
        const std::vector<std::string>& values = opt->results();
        switch (m->kind) {
        case FlagKind::Alias: {
            const Field* field = find_config_field(m->field);
            MWB_CHECK(field != nullptr, "flag table: {} names no field {}", m->flag, m->field);
            if (!m->value.empty()) {
                if (!values.empty() && !values.back().empty() && values.back() != "true" && values.back() != "1")
                    issues.push_back({std::string(m->field), fmt::format("{} takes no value (got {})", m->flag,
                                                                         values.back())});
                else set(*field, m->value);
            } else if (values.empty() && field->type_name() == "bool") {
                set(*field, "true");
            } else {
                for (const std::string& v : values) set(*field, v);
            }
            break;
        }
        case FlagKind::NoEffect: break;
        case FlagKind::OnlyDefault:
            if (values.empty() || values.back() != m->value)
                issues.push_back({std::string(m->flag.substr(2)),
                                  fmt::format("{} {}: not supported yet ({}); only {} is accepted", m->flag,
                                              joined(values), m->note, m->value)});
            break;
        case FlagKind::Unsupported:
            issues.push_back({std::string(m->flag.substr(2)),
                              fmt::format("{}: not supported yet ({})", m->flag, m->note)});
            break;
        }
    }
    if (!issues.empty()) throw ConfigError(std::move(issues), "command line");
}

std::vector<RecordedFlag> ConfigFlags::recorded() const {
    std::vector<RecordedFlag> out;
    for (const auto& [m, opt] : megatron_)
        if (opt->count() > 0 && (m->kind == FlagKind::NoEffect || m->kind == FlagKind::OnlyDefault))
            out.push_back({std::string(m->flag), opt->results(), std::string(m->note)});
    return out;
}

std::string closest_flag(const CLI::App& app, std::string_view flag) {
    std::vector<std::string> names;
    for (const CLI::Option* o : app.get_options())
        for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
    std::vector<std::string_view> views(names.begin(), names.end());
    return closest_name(flag, views);
}

std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, bool print) {
    try {
        app.parse(argc, argv);
        return std::nullopt;
    } catch (const CLI::Success& e) {  // --help (CallForHelp is one)
        if (print) app.exit(e);
        return 0;
    } catch (const CLI::ExtrasError& e) {
        if (print) {
            std::string msg = fmt::format("{}: invalid command line: {}", app.get_name(), e.what());
            for (const std::string& extra : app.remaining()) {
                if (!extra.starts_with("--")) continue;
                const std::string name = extra.substr(0, extra.find('='));
                if (const std::string hint = closest_flag(app, name); !hint.empty())
                    msg += fmt::format("\n  unknown flag {} (did you mean {}?)", name, hint);
                else msg += fmt::format("\n  unknown flag {}", name);
            }
            std::cerr << msg << "\n(" << app.get_name() << " --help lists every flag)\n";
        }
        return 2;
    } catch (const CLI::ParseError& e) {
        if (print) std::cerr << app.get_name() << ": invalid command line: " << e.what() << "\n";
        return 2;
    }
}

}  // namespace mwb
