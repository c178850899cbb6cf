// Configuration: JSON and flags onto the struct tree, errors that name the field, validation rules.
#include "support/fixtures.h"

#include "config/config_io.h"
#include "config/validate.h"

#include <QtTest>

#include <fstream>

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
        QVERIFY2(doc.substr(a + begin.size(), b - a - begin.size()) == config_reference_markdown(),
                 "docs/config.md is out of date: regenerate its reference with mwb-train --config-reference");
    }

    void reference_docs_list_every_field() {
        const std::string md = config_reference_markdown();
        for (const Field& f : config_fields()) QVERIFY2(md.find("`" + std::string(f.name) + "`") != std::string::npos, f.name.data());
    }
};

QTEST_APPLESS_MAIN(TestConfig)
#include "test_config.moc"
