// mwb-generate: text from any mwb checkpoint (any training layout; the loader reshards the weights to
// this one process, or under mpirun to a tensor/pipeline layout of the ranks), with a key/value cache,
// greedy or sampled decoding, streamed as it is produced.
//   [mpirun -np T·P] mwb-generate --load CKPT [--ckpt-step N] [--tokenizer-type ... --tokenizer-model ...
//                --vocab-file ... --merge-file ...] (--prompt TEXT ... | --prompt-file FILE) [--max-new-tokens 64]
//                [--temperature 1.0] [--top-k 0] [--top-p 1.0] [--seed 1234] [--greedy] [--device cpu|cuda]
//                [--threads N] [--json] [--tensor-model-parallel-size T] [--pipeline-model-parallel-size P]
// Plain mode prints each prompt, then its completion token by token. --json prints one object per line
// (start, token, done, error; docs/generation.md). Diagnostics go to stderr. Exit 2: bad arguments or input.
// Under mpirun every rank decodes its part and rank 0 alone writes.
#include "backend/config/config_io.h"
#include "backend/data/tokenizer.h"
#include "backend/generate/checkpoint_model.h"
#include "backend/generate/generation.h"
#include "mwb/kernels/device.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"
#include "backend/parallel/parallel_context.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

namespace {

using namespace mwb;
using namespace mwb::generate;

/// An error the user can fix (exit 2), naming the flag or file.
struct InputError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Args {
    std::string load, tokenizer_type, tokenizer_model, vocab_file, merge_file, prompt_file, device = "cpu";
    std::optional<int64_t> ckpt_step;
    std::vector<std::string> prompts;
    int64_t max_new_tokens = 64, top_k = 0, threads = 0;
    int tensor_parallel = 0, pipeline_parallel = 1;  // 0: the ranks over the pipeline stages
    double temperature = 1.0, top_p = 1.0;
    uint64_t seed = 1234;
    bool greedy = false, json = false;
};

/// Rank 0 writes everything (stdout and the progress on stderr); the other ranks only decode.
bool speaks = true;

void out(std::string_view text) {
    if (!speaks) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
}

void emit(const nlohmann::ordered_json& j) {
    out(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

void check_args(const Args& a) {
    if (a.prompts.empty() == a.prompt_file.empty())
        throw InputError("give --prompt TEXT (one or more) or --prompt-file FILE");
    if (a.max_new_tokens < 1)
        throw InputError(fmt::format("--max-new-tokens must be at least 1 (got {})", a.max_new_tokens));
    if (!(a.temperature >= 0)) throw InputError(fmt::format("--temperature must be >= 0 (got {})", a.temperature));
    if (a.top_k < 0) throw InputError(fmt::format("--top-k must be >= 0 (got {})", a.top_k));
    if (!(a.top_p > 0 && a.top_p <= 1)) throw InputError(fmt::format("--top-p must be in (0, 1] (got {})", a.top_p));
    if (a.threads < 0) throw InputError(fmt::format("--threads must be >= 1 (got {})", a.threads));
    if (a.device != "cpu" && a.device != "cuda")
        throw InputError("--device must be cpu or cuda (got '" + a.device + "')");
}

/// The decoder's device for --device; --device cuda needs a build with the CUDA kernels and a usable GPU.
Device generation_device(const std::string& flag) {
    if (flag == "cpu") return Device::CPU;
    const DeviceReport r = probe_devices();
    if (!r.cuda_kernels_built)
        throw InputError("--device cuda: this mwb-generate was built without CUDA (no nvcc at build time); use "
                         "--device cpu");
    if (r.cuda_devices == 0) throw InputError("--device cuda: no usable GPU (" + r.reason + "); use --device cpu");
    device::set_device(0);
    return Device::CUDA;
}

/// Generation's layout of the world's ranks: T·P must be the world (no data parallelism).
ParallelConfig layout_of(const Args& a, int world_size) {
    ParallelConfig p;
    if (a.pipeline_parallel < 1)
        throw InputError(
            fmt::format("--pipeline-model-parallel-size must be at least 1 (got {})", a.pipeline_parallel));
    p.pipeline_model_parallel_size = a.pipeline_parallel;
    p.tensor_model_parallel_size = a.tensor_parallel > 0 ? a.tensor_parallel : world_size / a.pipeline_parallel;
    if (a.tensor_parallel < 0 || p.tensor_model_parallel_size * p.pipeline_model_parallel_size != world_size)
        throw InputError(
            fmt::format("--tensor-model-parallel-size {} x --pipeline-model-parallel-size {} must equal the {} rank(s) "
                        "mwb-generate runs on (mpirun -np)",
                        p.tensor_model_parallel_size, p.pipeline_model_parallel_size, world_size));
    return p;
}

/// The whole model's parameter count from the ranks' parts: every slice of a split tensor once, a
/// tensor that the tensor-parallel ranks replicate once, the last stage's copy of a tied embedding not.
int64_t whole_model_parameters(const ParamLayout& layout, ParallelContext* par) {
    if (!par) return layout.parameter_count();
    double mine = 0;
    for (const ParamInfo& p : layout)
        if (!p.tied_copy && (p.split_dim >= 0 || par->coord().tp == 0)) mine += static_cast<double>(p.numel);
    par->world().all_reduce_sum(&mine, 1);
    return static_cast<int64_t>(mine);
}

int run(const Args& a, World& world) {
    check_args(a);
    if (a.device == "cuda" && world.size() > 1)
        throw InputError(fmt::format("--device cuda: generation on a GPU runs in one process (this is {} ranks "
                                     "under mpirun); use --device cpu for a split model",
                                     world.size()));
    const Device device = generation_device(a.device);
    if (a.threads > 0) ops::set_num_threads(static_cast<int>(a.threads));
    const auto t0 = std::chrono::steady_clock::now();
    const ParallelConfig layout = layout_of(a, world.size());
    std::unique_ptr<ParallelContext> par;
    if (world.size() > 1) par = std::make_unique<ParallelContext>(world, layout);
    std::unique_ptr<CheckpointModel> m;
    try {
        m = load_checkpoint_model(a.load, a.ckpt_step, par.get());
    } catch (const Error& e) {
        throw InputError(fmt::format("--load {}: {}", a.load, e.what()));
    }
    Config& cfg = m->config;
    if (!a.tokenizer_type.empty()) cfg.data.tokenizer_type = a.tokenizer_type;
    if (!a.tokenizer_model.empty()) cfg.data.tokenizer_model = a.tokenizer_model;
    if (!a.vocab_file.empty()) cfg.data.vocab_file = a.vocab_file;
    if (!a.merge_file.empty()) cfg.data.merge_file = a.merge_file;
    std::unique_ptr<data::Tokenizer> tok;
    try {
        tok = data::make_tokenizer(cfg.data, cfg.model);
    } catch (const Error& e) {
        throw InputError(
            fmt::format("tokenizer (--tokenizer-type/--tokenizer-model/--vocab-file/--merge-file): {}", e.what()));
    }
    const GptDims& d = m->model->dims();
    if (tok->vocab_size() > d.vocab)
        throw InputError(fmt::format("the tokenizer {} has {} ids, the checkpoint's model embeds only {}", tok->name(),
                                     tok->vocab_size(), d.vocab));

    std::vector<std::string> texts = a.prompts;
    if (!a.prompt_file.empty()) {
        try {
            texts = read_prompts_file(a.prompt_file, "--prompt-file");
        } catch (const Error& e) {
            throw InputError(e.what());
        }
    }
    std::vector<std::vector<int32_t>> prompts;
    int64_t longest = 0;
    for (std::size_t i = 0; i < texts.size(); ++i) {
        std::vector<int32_t> ids;
        if (tok->bos() >= 0) ids.push_back(tok->bos());
        try {
            tok->encode(texts[i], ids);
        } catch (const Error& e) {
            throw InputError(fmt::format("prompt {}: {}", i, e.what()));
        }
        if (ids.empty()) throw InputError(fmt::format("prompt {} encodes to no tokens", i));
        longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
        prompts.push_back(std::move(ids));
    }
    const int64_t context = d.max_positions > 0 ? d.max_positions : cfg.model.seq_length;
    if (longest >= context)
        throw InputError(fmt::format("a prompt has {} tokens; the model's context is {} positions", longest, context));
    const int64_t max_len = std::min(context, longest + a.max_new_tokens);

    GenerateOptions o;
    o.sampling = {a.greedy, a.temperature, a.top_k, a.top_p, a.seed};
    o.max_new_tokens = a.max_new_tokens;
    o.eos = tok->eod();
    o.vocab = tok->vocab_size();
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t parameters = whole_model_parameters(m->model->layout(), par.get());
    if (speaks)
        std::fprintf(stderr,
                     "mwb-generate: %s (iteration %lld), %lld parameters%s, loaded in %.2f s; %zu prompt(s), %s\n",
                     m->dir.c_str(), static_cast<long long>(m->iteration), static_cast<long long>(parameters),
                     par ? fmt::format(", tensor-parallel {} x pipeline {}", layout.tensor_model_parallel_size,
                                       layout.pipeline_model_parallel_size)
                               .c_str()
                         : "",
                     load_s, prompts.size(), o.sampling.is_greedy() ? "greedy" : "sampling");

    const auto done = [&](std::size_t i, const Completion& c) {
        const double tps = c.seconds > 0 ? static_cast<double>(c.tokens.size()) / c.seconds : 0.0;
        if (a.json)
            emit({{"type", "done"},
                  {"prompt_index", i},
                  {"completion", valid_utf8(tok->decode(c.tokens))},
                  {"completion_tokens", c.tokens.size()},
                  {"finish_reason", finish_reason_name(c.finish)},
                  {"tokens_per_sec", tps}});
        else if (speaks)
            std::fprintf(stderr, "\n[prompt %zu: %zu tokens, %s, %.1f tokens/s]\n", i, c.tokens.size(),
                         finish_reason_name(c.finish), tps);
    };
    if (a.json) {
        emit({{"type", "start"},
              {"prompts", prompts.size()},
              {"model",
               {{"checkpoint", m->dir.string()},
                {"iteration", m->iteration},
                {"num_layers", d.layers},
                {"hidden_size", d.hidden},
                {"num_attention_heads", d.heads},
                {"num_query_groups", d.kv_groups()},
                {"vocab_size", d.vocab},
                {"max_position_embeddings", context},
                {"tokenizer", tok->name()},
                {"parameters", parameters}}}});
        // The whole batch together; tokens stream as each step produces them, a prompt's done line as
        // soon as it finishes (the others go on).
        Decoder dec(d, m->model->partition(), m->model->layout(), m->model->params(), m->groups,
                    static_cast<int64_t>(prompts.size()), max_len, device);
        std::vector<TextStream> streams(prompts.size(), TextStream(*tok));
        complete(
            dec, prompts, o,
            [&](int64_t r, int32_t t) {
                emit({{"type", "token"}, {"prompt_index", r}, {"token", t}, {"text", streams[r].push(t)}});
            },
            [&](int64_t r, const Completion& c) { done(static_cast<std::size_t>(r), c); });
    } else {
        // One prompt after the other so the text reads in order; each keeps its own random stream, so
        // the text is the one --json's batch gives.
        Decoder dec(d, m->model->partition(), m->model->layout(), m->model->params(), m->groups, 1, max_len, device);
        for (std::size_t i = 0; i < prompts.size(); ++i) {
            // The prompt as its ids decode, the completion decoded after it: the text printed is
            // decode(prompt + completion), with the tokenizer's own separator between the two.
            TextStream stream(*tok, prompts[i]);
            out(stream.context_text());
            o.first_stream = static_cast<int64_t>(i);
            const auto comps = complete(dec, {prompts[i]}, o, [&](int64_t, int32_t t) { out(stream.push(t)); });
            out(stream.flush() + "\n");
            done(i, comps[0]);
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    World world(&argc, &argv);
    speaks = world.rank() == 0;
    Args a;
    CLI::App app{"mwb-generate: text from an mwb checkpoint (KV cache, greedy or sampled, streamed)", "mwb-generate"};
    app.add_option("--load", a.load, "Checkpoint directory (its latest) or one iter_NNNNNNN folder")->required();
    app.add_option("--ckpt-step", a.ckpt_step, "Iteration to load instead of latest");
    app.add_option("--tokenizer-type", a.tokenizer_type, "Tokenizer (default: the checkpoint's configuration)");
    app.add_option("--tokenizer-model", a.tokenizer_model, "tokenizer.json / tokenizer.model / ranks file");
    app.add_option("--vocab-file", a.vocab_file, "GPT2BPETokenizer vocab.json");
    app.add_option("--merge-file", a.merge_file, "GPT2BPETokenizer merges.txt");
    app.add_option("--prompt", a.prompts, "A prompt (repeat for a batch)");
    app.add_option("--prompt-file", a.prompt_file, "One prompt per line (UTF-8; empty lines ignored)");
    app.add_option("--max-new-tokens", a.max_new_tokens, "Tokens to generate per prompt at most")
        ->capture_default_str();
    app.add_option("--temperature", a.temperature, "Softmax temperature; 0 = greedy")->capture_default_str();
    app.add_option("--top-k", a.top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str();
    app.add_option("--top-p", a.top_p, "Nucleus: keep the most likely tokens up to this mass; 1 = off")
        ->capture_default_str();
    app.add_option("--seed", a.seed, "Random seed (the same seed gives the same text)")->capture_default_str();
    app.add_flag("--greedy", a.greedy, "Argmax decoding");
    app.add_option("--device", a.device, "cpu or cuda (one GPU)")->capture_default_str();
    app.add_option("--threads", a.threads, "CPU threads (default: OpenMP's)");
    app.add_flag("--json", a.json, "One JSON object per line on stdout");
    app.add_option("--tensor-model-parallel-size", a.tensor_parallel,
                   "Under mpirun: ranks each weight matrix is split over (default: the ranks / pipeline size)");
    app.add_option("--pipeline-model-parallel-size", a.pipeline_parallel,
                   "Under mpirun: pipeline stages the layers are split into")
        ->capture_default_str();
    bool json_requested = false;
    for (int i = 1; i < argc; ++i) json_requested |= std::string_view(argv[i]) == "--json";
    const auto fail = [&](const std::string& message, int code) {
        if (json_requested) emit({{"type", "error"}, {"message", message}});
        // Bad input fails alike on every rank: rank 0 says it. Anything else may be one rank's own.
        if (speaks || code != 2)
            std::cerr << "mwb-generate: error: " << (speaks ? "" : fmt::format("rank {}: ", world.rank())) << message
                      << "\n";
        return code;
    };
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        return fail(e.what(), 2);
    }
    try {
        return run(a, world);
    } catch (const InputError& e) {
        return fail(e.what(), 2);
    } catch (const std::exception& e) {
        return fail(e.what(), 1);
    }
}
