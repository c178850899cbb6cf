// Configuration: JSON and flags onto the struct tree, errors that name the field, validation rules.
#include "support/fixtures.h"
#include "support/suite.h"

#include "backend/config/cli.h"
#include "backend/config/config_io.h"
#include "backend/config/validate.h"

#include <QtTest>

#include <algorithm>
#include <fstream>

namespace test_backend_config {

using namespace mwb;

namespace {

Config valid_config() {
    Config c;
    c.model.num_layers = 4;
    c.model.hidden_size = 64;
    c.model.num_attention_heads = 4;
    c.model.seq_length = 32;
    c.training.train_iters = 10;
    c.training.lr = 1e-3;
    c.data.mock_data = true;
    resolve(c, 1, 1001);
    return c;
}

bool mentions(const std::vector<ConfigIssue>& issues, const std::string& field, const std::string& text) {
    for (const auto& i : issues)
        if (i.field == field && i.message.find(text) != std::string::npos) return true;
    return false;
}

}  // namespace

class TestConfig : public QObject {
    Q_OBJECT
private slots:
    void defaults_are_megatron_defaults() {
        const Config c;
        QCOMPARE(c.training.adam_beta2, 0.999);
        QCOMPARE(c.training.weight_decay, 0.01);
        QCOMPARE(c.training.lr_decay_style, std::string("linear"));
        QCOMPARE(c.model.make_vocab_size_divisible_by, 128);
        QCOMPARE(c.data.split, std::string("969,30,1"));
        QCOMPARE(c.training.initial_loss_scale, 4294967296.0);
        // The table of Megatron-LM's defaults (megatron/training/arguments.py and config/training_config.py
        // at d98e8a6): key, Megatron's default as JSON ("null" where Megatron has None and the field's
        // "not given" value stands for it).
        const std::pair<const char*, const char*> megatron[] = {
            {"hidden_dropout", "0.1"}, {"attention_dropout", "0.1"}, {"init_method_std", "0.02"},
            {"layernorm_epsilon", "1e-05"}, {"normalization", "\"LayerNorm\""},
            {"untie_embeddings_and_output_weights", "false"}, {"adam_beta1", "0.9"}, {"adam_beta2", "0.999"},
            {"adam_eps", "1e-08"}, {"weight_decay", "0.01"}, {"clip_grad", "1.0"}, {"min_lr", "0.0"},
            {"lr_warmup_iters", "0"}, {"lr_warmup_samples", "0"}, {"lr_warmup_init", "0.0"},
            {"lr_warmup_fraction", "null"}, {"lr_decay_style", "\"linear\""},
            {"lr_wsd_decay_style", "\"exponential\""}, {"lr_decay_iters", "null"}, {"lr_decay_samples", "null"},
            {"weight_decay_incr_style", "\"constant\""}, {"start_weight_decay", "null"},
            {"end_weight_decay", "null"}, {"train_iters", "null"}, {"train_samples", "null"},
            {"rampup_batch_size", "null"}, {"step_batch_size_schedule", "null"}, {"global_batch_size", "null"},
            {"seed", "1234"}, {"lr", "null"}, {"loss_scale", "null"}, {"initial_loss_scale", "4294967296.0"},
            {"min_loss_scale", "1.0"}, {"loss_scale_window", "1000"}, {"hysteresis", "2"},
            {"make_vocab_size_divisible_by", "128"}, {"tensor_model_parallel_size", "1"},
            {"pipeline_model_parallel_size", "1"}, {"sequence_parallel", "false"},
            {"use_distributed_optimizer", "false"}, {"eval_iters", "100"}, {"eval_interval", "null"},
            {"log_interval", "100"}, {"save_interval", "null"}, {"exit_interval", "null"},
            {"exit_duration_in_mins", "null"}, {"no_save_optim", "null"}, {"no_load_optim", "null"},
            {"no_load_rng", "null"}, {"finetune", "false"}, {"log_throughput", "false"},
            {"tensorboard_dir", "null"}, {"tensorboard_log_interval", "1"},
            {"log_loss_scale_to_tensorboard", "true"}, {"log_validation_ppl_to_tensorboard", "false"},
            {"log_timers_to_tensorboard", "false"}, {"log_memory_to_tensorboard", "false"}, {"mock_data", "false"},
            {"bf16", "false"}, {"fp16", "false"}, {"recompute_granularity", "null"}, {"recompute_num_layers", "null"},
        };
        const nlohmann::json ours = to_json(c);
        for (const auto& [key, def] : megatron) {
            const nlohmann::json m = nlohmann::json::parse(def);
            const nlohmann::json& v = ours.at(key);
            // Megatron's None is our "not given" value: 0, "" or an empty list (or false for its store_true
            // flags whose default is None); lr's is kLrNotGiven, as 0 is a learning rate.
            const bool unset = v == 0 || v == "" || v == false || (v.is_array() && v.empty()) ||
                               (key == std::string("lr") && v == kLrNotGiven);
            QVERIFY2(m.is_null() ? unset : v == m, qPrintable(QString("%1: ours %2, Megatron-LM's %3")
                                                                  .arg(key, QString::fromStdString(v.dump()), def)));
        }
    }

    void non_finite_floats_are_refused_by_name() {
        for (const char* v : {"inf", "-inf", "nan", "1e400"}) {
            Config c;
            try {
                set_field(c, *find_config_field("lr"), v);
                QFAIL(v);
            } catch (const ConfigError& e) {
                QCOMPARE(e.issues().at(0).field, std::string("lr"));
                QVERIFY2(std::string(e.what()).find("finite") != std::string::npos, e.what());
            }
        }
        // JSON has no inf or nan; 1e400 overflows while parsing: the key and the file are named.
        try {
            parse_config(R"({"num_layers": 2, "lr": 1e400})", "run.json");
            QFAIL("1e400 accepted");
        } catch (const ConfigError& e) {
            QCOMPARE(e.issues().at(0).field, std::string("lr"));
            const std::string msg = e.what();
            QVERIFY2(msg.find("lr in run.json") != std::string::npos && msg.find("1e400") != std::string::npos,
                     msg.c_str());
        }
        // Configurations built in code: validation checks every float field.
        Config c = valid_config();
        c.model.hidden_dropout = std::numeric_limits<double>::infinity();
        c.training.adam_eps = std::numeric_limits<double>::quiet_NaN();
        const auto issues = validate(c, 1);
        QVERIFY(mentions(issues, "hidden_dropout", "finite"));
        QVERIFY(mentions(issues, "adam_eps", "finite"));
    }

    void missing_required_options_are_named() {
        const auto issues = validate(Config{}, 1);
        for (const char* f : {"num_layers", "hidden_size", "num_attention_heads", "seq_length", "lr", "train_iters"})
            QVERIFY2(mentions(issues, f, "required"), f);
        QVERIFY(mentions(issues, "train_iters", "--train-samples"));
        QVERIFY(mentions(issues, "lr", "--lr"));
        // Nothing that only follows from what is missing (ffn_hidden_size = 4 x 0, lr_decay_iters = 0).
        QVERIFY(!mentions(issues, "ffn_hidden_size", ""));
        QVERIFY(!mentions(issues, "lr_decay_iters", ""));
    }

    void lr_zero_is_a_learning_rate() {
        // Megatron-LM trains with --lr 0 (the weights stay where they are): only a missing lr is required.
        Config c = valid_config();
        c.training.lr = 0;
        QVERIFY(validate(c, 1).empty());
        c.training.lr = -1e-3;
        const auto issues = validate(c, 1);
        QVERIFY(mentions(issues, "lr", "must not be negative"));
        QVERIFY(!mentions(issues, "lr", "required"));
        c.training.lr = kLrNotGiven;
        QVERIFY(mentions(validate(c, 1), "lr", "required"));
        set_field(c, *find_config_field("lr"), "0");
        QCOMPARE(c.training.lr, 0.0);
        QVERIFY(validate(c, 1).empty());
    }

    void sample_based_training_resolves_as_megatron() {
        Config c = valid_config();
        c.training.train_iters = 0;
        c.training.lr_decay_iters = 0;
        c.training.global_batch_size = 8;
        c.training.train_samples = 100;  // update_train_iters: 100 // 8
        c.training.lr_warmup_samples = 16;
        resolve(c, 1, 1001);
        QCOMPARE(c.training.train_iters, int64_t{12});
        QCOMPARE(c.training.lr_decay_samples, int64_t{100});
        QCOMPARE(c.training.lr_decay_iters, int64_t{0});
        QVERIFY2(validate(c, 1).empty(), validate(c, 1).empty() ? "" : validate(c, 1)[0].message.c_str());
        Config both = c;
        both.training.lr_warmup_iters = 3;  // iteration settings in a sample-based run
        QVERIFY(mentions(validate(both, 1), "lr_warmup_iters", "lr_warmup_samples"));
        Config fraction = valid_config();
        fraction.training.lr_warmup_fraction = 0.1;
        fraction.training.lr_warmup_iters = 2;
        QVERIFY(mentions(validate(fraction, 1), "lr_warmup_fraction", "one of"));
    }

    void batch_rampup_follows_megatron() {
        Config c = valid_config();
        c.training.micro_batch_size = 2;
        c.training.global_batch_size = 6;
        c.training.rampup_batch_size = {"2", "2", "8"};  // (6 - 2) / 2 = 2 increments of 8 / 2 = 4 samples
        QVERIFY(validate(c, 1).empty());
        // RampupBatchsizeNumMicroBatchesCalculator.update: start + int(consumed / 4.0) x 2, the full batch
        // once consumed > 8.
        const std::pair<int64_t, int64_t> expected[] = {{0, 2}, {2, 2}, {3, 2}, {4, 4}, {7, 4}, {8, 6}, {9, 6}, {100, 6}};
        for (const auto& [consumed, batch] : expected) {
            QCOMPARE(global_batch_size_at(c, consumed), batch);
            QCOMPARE(num_micro_batches(c, 1, consumed), batch / 2);
        }
        c.training.train_iters = 0;
        c.training.lr_decay_iters = 0;
        c.training.train_samples = 20;  // 2 + 2 + 4 + 6 + 6 = 20: five iterations
        QCOMPARE(iterations_for_samples(c), int64_t{5});
        Config odd = valid_config();
        odd.training.micro_batch_size = 2;
        odd.training.global_batch_size = 6;
        odd.training.rampup_batch_size = {"3", "3", "8"};  // 3 is not a multiple of micro x DP
        QVERIFY(mentions(validate(odd, 1), "global_batch_size", "scheduled global batch size 3"));
        // step_batch_size_schedule: thresholds in tokens (seq_length 32), suffixes.
        Config step = valid_config();
        step.training.global_batch_size = 0;
        step.training.step_batch_size_schedule = "0:2 0.32K:4 1K:8";
        resolve(step, 1, 1001);
        QCOMPARE(step.training.global_batch_size, 8);  // the last step's
        QCOMPARE(global_batch_size_at(step, 9), int64_t{2});
        QCOMPARE(global_batch_size_at(step, 10), int64_t{4});   // 320 tokens / 32
        QCOMPARE(global_batch_size_at(step, 30), int64_t{4});
        QCOMPARE(global_batch_size_at(step, 31), int64_t{8});   // 1000 tokens // 32 = 31 samples
        step.training.global_batch_size = 16;  // both given: refused, as Megatron-LM does
        QVERIFY(mentions(validate(step, 1), "step_batch_size_schedule", "cannot both be set"));
    }

    void json_round_trip() {
        Config c = valid_config();
        c.training.recompute_granularity = "full";
        c.training.recompute_method = "block";
        c.data.data_path = {"0.3", "a", "0.7", "b"};
        const nlohmann::json j = to_json(c);
        const Config back = parse_config(j.dump(), "test");
        QCOMPARE(to_json(back), j);
    }

    void unknown_key_is_an_error_with_a_suggestion() {
        try {
            parse_config(R"({"num_layer": 4})", "run.json");
            QFAIL("no error");
        } catch (const ConfigError& e) {
            QCOMPARE(e.issues().size(), std::size_t{1});
            QCOMPARE(e.issues()[0].field, std::string("num_layer"));
            const std::string what = e.what();
            QVERIFY2(what.find("unknown key \"num_layer\" in run.json") != std::string::npos, e.what());
            QVERIFY2(what.find("did you mean \"num_layers\"") != std::string::npos, e.what());
        }
    }

    void wrong_types_name_the_field() {
        const std::pair<const char*, const char*> cases[] = {
            {R"({"num_layers": "four"})", "expected an integer"},
            {R"({"num_layers": 2.5})", "expected an integer"},
            {R"({"bf16": 1})", "expected true or false"},
            {R"({"lr": "fast"})", "expected a number"},
            {R"({"lr_decay_style": "exponential"})", "is not one of constant, linear, cosine"},
            {R"({"data_path": 3})", "expected a list of strings"},
            {R"([1, 2])", "must hold a JSON object"},
            {R"({"num_layers": 4)", "not valid JSON"},
        };
        for (const auto& [json, expected] : cases) {
            try {
                parse_config(json, "cfg.json");
                QFAIL(json);
            } catch (const ConfigError& e) {
                QVERIFY2(std::string(e.what()).find(expected) != std::string::npos, e.what());
                QVERIFY2(std::string(e.what()).find("cfg.json") != std::string::npos, e.what());
            }
        }
    }

    void kebab_case_keys_are_not_json_keys() {
        QVERIFY_THROWS_EXCEPTION(ConfigError, parse_config(R"({"num-layers": 4})", "cfg.json"));
    }

    void flags_set_fields() {
        Config c;
        set_field(c, *find_config_field("num-layers"), "12");
        set_field(c, *find_config_field("bf16"), "");
        set_field(c, *find_config_field("lr"), "6e-4");
        set_field(c, *find_config_field("data_path"), "corpus_text_document");
        QCOMPARE(c.model.num_layers, 12);
        QVERIFY(c.training.bf16);
        QCOMPARE(c.training.lr, 6e-4);
        QCOMPARE(c.data.data_path, std::vector<std::string>{"corpus_text_document"});
        set_field(c, *find_config_field("bf16"), "false");
        QVERIFY(!c.training.bf16);
        QVERIFY_THROWS_EXCEPTION(ConfigError, set_field(c, *find_config_field("num-layers"), "12x"));
        QVERIFY_THROWS_EXCEPTION(ConfigError, set_field(c, *find_config_field("recompute-granularity"), "most"));
    }

    void resolve_fills_derived_values() {
        Config c;
        c.model.hidden_size = 64;
        c.model.seq_length = 128;
        c.training.micro_batch_size = 4;
        c.training.train_iters = 500;
        c.training.bf16 = true;
        c.parallel.sequence_parallel = true;
        const auto notes = resolve(c, 1, 50257);
        QCOMPARE(c.model.ffn_hidden_size, 256);
        QCOMPARE(c.model.max_position_embeddings, 128);
        QCOMPARE(c.training.global_batch_size, 4);
        QCOMPARE(c.training.lr_decay_iters, int64_t{500});
        QVERIFY(c.training.accumulate_allreduce_grads_in_fp32);
        QVERIFY(!c.parallel.sequence_parallel);
        QCOMPARE(notes.size(), std::size_t{1});
        QCOMPARE(padded_vocab_size(c), int64_t{50304});  // GPT-2's 50257 padded to a multiple of 128
        c.parallel.tensor_model_parallel_size = 8;
        QCOMPARE(padded_vocab_size(c), int64_t{51200});  // multiple of 128 x 8
    }

    void valid_config_passes() { QVERIFY(validate(valid_config(), 1).empty()); }

    // NullTokenizer: current Megatron-LM's vocabulary is vocab_size ids (EOD = vocab_size - 1 or
    // null_tokenizer_eod_id), the legacy reading vocab_size + 1; the EOD id is checked against it.
    void null_tokenizer_vocabulary_and_eod_id() {
        Config c = valid_config();
        c.data.tokenizer_type = "NullTokenizer";
        c.model.vocab_size = 50257;
        QCOMPARE(model_vocab_size(c), int64_t{50257});
        QVERIFY(validate(c, 1).empty());
        c.data.null_tokenizer_eod_id = 50257;
        QVERIFY(mentions(validate(c, 1), "null_tokenizer_eod_id", "[0, vocab_size = 50257)"));
        c.data.null_tokenizer_eod_id = 0;
        QVERIFY(validate(c, 1).empty());
        c.data.null_tokenizer_legacy_eod = true;
        QVERIFY(mentions(validate(c, 1), "null_tokenizer_eod_id", "cannot be combined"));
        c.data.null_tokenizer_eod_id = -1;
        QVERIFY(validate(c, 1).empty());
        QCOMPARE(model_vocab_size(c), int64_t{50258});
        QCOMPARE(padded_vocab_size(c), int64_t{50304});
    }

    void validation_names_each_field() {
        Config c = valid_config();
        c.model.num_attention_heads = 5;                        // does not divide 64
        c.model.kv_channels = 0;                                // the head dim derived from hidden / heads
        c.training.global_batch_size = 10;
        c.training.micro_batch_size = 4;                        // 10 not a multiple of 4
        c.training.bf16 = c.training.fp16 = true;
        c.training.recompute_granularity = "selective";
        c.training.recompute_method = "uniform";                // only with full
        c.model.hidden_dropout = 1.0;
        c.training.min_lr = 1.0;                                // > lr
        c.data.split = "969,abc";
        const auto issues = validate(c, 1);
        QVERIFY(mentions(issues, "num_attention_heads", "hidden_size (64) must be divisible by num_attention_heads (5)"));
        QVERIFY(mentions(issues, "global_batch_size", "global_batch_size (10) must be a positive multiple of micro_batch_size (4)"));
        QVERIFY(mentions(issues, "fp16", "bf16 and fp16 cannot both be set"));
        QVERIFY(mentions(issues, "recompute_method", "only used with recompute_granularity full"));
        QVERIFY(mentions(issues, "hidden_dropout", "must be in [0, 1)"));
        QVERIFY(mentions(issues, "min_lr", "must be in [0, lr"));
        QVERIFY(mentions(issues, "split", "969,abc"));
        QCOMPARE(issues.size(), std::size_t{7});
    }

    void parallel_layout_rules() {
        Config c = valid_config();
        c.parallel.tensor_model_parallel_size = 2;
        QVERIFY(mentions(validate(c, 1), "tensor_model_parallel_size", "must divide the number of ranks (1)"));
        QVERIFY(validate(c, 2).empty());
        c.model.num_attention_heads = 2;
        c.parallel.tensor_model_parallel_size = 4;
        QVERIFY(mentions(validate(c, 4), "num_attention_heads", "num_attention_heads (2) must be divisible by tensor_model_parallel_size (4)"));
        c = valid_config();
        c.parallel.pipeline_model_parallel_size = 2;
        c.parallel.num_layers_per_virtual_pipeline_stage = 1;
        c.training.global_batch_size = 3;
        QVERIFY(mentions(validate(c, 2), "num_layers_per_virtual_pipeline_stage",
                         "needs the number of micro-batches (3) to be a multiple of pipeline_model_parallel_size (2)"));
        c.training.global_batch_size = 4;
        QVERIFY(validate(c, 2).empty());
        c = valid_config();
        c.parallel.pipeline_model_parallel_size = 3;
        QVERIFY(mentions(validate(c, 3), "pipeline_model_parallel_size", "num_layers (4) must be divisible by pipeline_model_parallel_size (3)"));
    }

    void cuda_graph_rules_name_their_fields() {
        Config c = valid_config();
        c.runtime.enable_cuda_graph = true;
        QVERIFY(validate(c, 1).empty());  // one rank, a constant batch: capturable
        c.runtime.cuda_graph_warmup_steps = 0;
        auto issues = validate(c, 1);
        QVERIFY(mentions(issues, "cuda_graph_warmup_steps", "must be at least 1 (got 0)"));
        QCOMPARE(issues.size(), std::size_t{1});
        // Pipeline, tensor and data parallelism capture their NCCL calls (the receives wait on the
        // GPU, the byte counts are added per replay): each alone and together, with no issue.
        const auto graphed = [] {
            Config g = valid_config();
            g.runtime.enable_cuda_graph = true;
            return g;
        };
        c = graphed();
        c.parallel.pipeline_model_parallel_size = 2;
        QVERIFY(validate(c, 2).empty());
        c = graphed();
        c.parallel.tensor_model_parallel_size = 2;
        QVERIFY(validate(c, 2).empty());
        c = graphed();
        c.training.global_batch_size = 4;
        QVERIFY(validate(c, 2).empty());  // two data-parallel ranks
        c = graphed();
        c.parallel.tensor_model_parallel_size = 2;
        c.parallel.pipeline_model_parallel_size = 2;
        c.training.global_batch_size = 8;
        QVERIFY(validate(c, 8).empty());  // TP2 x PP2 x DP2
        // Batch ramps: a graph per micro-batch count.
        c = graphed();
        c.training.global_batch_size = 8;
        c.training.rampup_batch_size = {"2", "2", "100"};
        QVERIFY(validate(c, 1).empty());
        QCOMPARE(max_num_micro_batches(c, 1), int64_t{8});  // the inputs' buffer: the largest count
        c.training.rampup_batch_size.clear();
        c.training.step_batch_size_schedule = "0:4 1000:8";
        QVERIFY(validate(c, 1).empty());
        c.training.step_batch_size_schedule = "0:16 1000:8";  // a schedule may go above global_batch_size
        QCOMPARE(max_num_micro_batches(c, 1), int64_t{16});
        c.training.step_batch_size_schedule.clear();
        QCOMPARE(max_num_micro_batches(c, 2), int64_t{4});  // data-parallel ranks split it
        // Without the flag the warm-up count is still checked (it is a field of its own).
        c = valid_config();
        c.runtime.cuda_graph_warmup_steps = 0;
        QVERIFY(mentions(validate(c, 1), "cuda_graph_warmup_steps", "must be at least 1 (got 0)"));
        // The CPU has no graphs: a note, as attention_backend cudnn gets.
        Config cpu;
        cpu.runtime.enable_cuda_graph = true;
        cpu.runtime.device = "cpu";
        const auto notes = resolve(cpu, 1, 1001);
        QVERIFY(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
            return n.find("enable_cuda_graph: no effect on the CPU") != std::string::npos;
        }));
    }

    void full_recompute_needs_method_and_layers() {
        Config c = valid_config();
        c.training.recompute_granularity = "full";
        auto issues = validate(c, 1);
        QVERIFY(mentions(issues, "recompute_method", "needs recompute_method"));
        QVERIFY(mentions(issues, "recompute_num_layers", "needs recompute_num_layers"));
        c.training.recompute_method = "block";
        c.training.recompute_num_layers = 5;
        QVERIFY(mentions(validate(c, 1), "recompute_num_layers", "exceeds the layers per pipeline stage (4)"));
    }

    void docs_config_md_is_up_to_date() {
        std::ifstream in(test::source_dir() / "docs" / "config.md");
        const std::string doc{std::istreambuf_iterator<char>(in), {}};
        const std::string begin = "<!-- BEGIN GENERATED: mwb-train --config-reference -->\n";
        const auto a = doc.find(begin), b = doc.find("<!-- END GENERATED -->");
        QVERIFY(a != std::string::npos && b != std::string::npos);
        QVERIFY2(doc.substr(a + begin.size(), b - a - begin.size()) == config_reference_markdown() + megatron_flags_markdown(),
                 "docs/config.md is out of date: regenerate its reference with mwb-train --config-reference");
    }

    void reference_docs_list_every_field() {
        const std::string md = config_reference_markdown();
        for (const Field& f : config_fields()) QVERIFY2(md.find("`" + std::string(f.name) + "`") != std::string::npos, f.name.data());
    }
};

MWB_TEST_SUITE_APPLESS(test_backend_config, TestConfig)
}  // namespace test_backend_config
#include "test_config.moc"
