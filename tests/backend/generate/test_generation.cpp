// Generation against the model's own full forward and against the definition of sampling:
//   - greedy decoding with the key/value cache picks, at every step, the argmax of the logits a full
//     forward of the whole sequence gives (GptModel::forward_logits: the training path, its own
//     attention, RoPE and position kernels), for GPT and Llama shapes and a batch of prompts of
//     different lengths, and a larger Llama shape on two threads (the same tokens as on one); the
//     cached logits equal the full forward's to 1e-4;
//   - sampled tokens follow the filtered softmax (temperature, top-k, top-p) recomputed here in float64:
//     chi-square at significance 0.001 over 20,000 draws with a fixed seed, and no token outside the
//     filtered support;
//   - the same seed gives the same tokens, another seed others; EOS stops a row; streamed text holds
//     back an unfinished UTF-8 character;
//   - a decode step run as one team of threads gives the very logits (bit for bit) of the same step
//     run as one parallel region per linear layer, and StepTeam lets no thread past a meeting before
//     all have reached it.
#include "backend/data/byte_tokenizer.h"
#include "backend/data/null_tokenizer.h"
#include "backend/generate/generation.h"
#include "backend/generate/step_team.h"
#include "backend/model/gpt_model.h"
#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"

#include "support/suite.h"

#include <omp.h>

#include <QtTest>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>

namespace test_generate_engine {

using namespace mwb;
using namespace mwb::generate;

namespace {

GptDims gpt_dims() {
    GptDims d;
    d.layers = 2;
    d.hidden = 64;
    d.heads = 4;
    d.ffn = 128;
    d.positions = GptDims::Positions::Learned;
    d.max_positions = 32;
    d.seq = 1;
    d.micro_batch = 1;
    d.vocab = 96;
    d.init_std = 0.25f;  // logits far apart: no near-ties for argmax to trip on
    return d;
}

GptDims llama_dims() {
    GptDims d = gpt_dims();
    d.groups = 2;  // grouped-query attention: 2 query heads per key/value head
    d.ffn = 96;
    d.swiglu = true;
    d.linear_bias = false;
    d.positions = GptDims::Positions::Rope;
    d.rotary_dim = 16;
    d.rmsnorm = true;
    d.tied_output = false;
    return d;
}

struct Model {
    OpContext ctx;
    Allocator alloc;
    std::unique_ptr<GptModel> model;
    explicit Model(const GptDims& d, uint64_t seed = 7) {
        model = std::make_unique<GptModel>(d, RecomputePolicy{}, DType::F32, ctx, alloc, false);
        model->init_weights(seed);
    }
};

/// Logits (S, V) of the full forward of `tokens` (S of them) with a model of sequence length S.
std::vector<float> full_logits(const GptDims& base, const GptModel& weights, const std::vector<int32_t>& tokens) {
    GptDims d = base;
    d.seq = static_cast<int64_t>(tokens.size());
    OpContext ctx;
    Allocator alloc;
    GptModel ref(d, RecomputePolicy{}, DType::F32, ctx, alloc, false);
    std::copy(weights.params().f32(), weights.params().f32() + weights.params().numel(), ref.params().f32());
    std::vector<int32_t> in = tokens;
    in.push_back(0);  // the (unused) target of the last position
    return ref.forward_logits(in.data());  // (B = 1, S, V)
}

void check_greedy_against_full_forward(const GptDims& d) {
    Model m(d);
    const std::vector<std::vector<int32_t>> prompts = {
        {5, 17, 3}, {40, 2, 2, 9, 61, 7, 30}, {88}, {11, 12, 13, 14, 15}};
    Decoder dec(d, m.model->layout(), m.model->params(), static_cast<int64_t>(prompts.size()), d.max_positions);
    GenerateOptions o;
    o.sampling.greedy = true;
    o.max_new_tokens = 14;
    const auto out = complete(dec, prompts, o);
    for (std::size_t r = 0; r < prompts.size(); ++r) {
        QCOMPARE(static_cast<int64_t>(out[r].tokens.size()), o.max_new_tokens);
        QVERIFY(out[r].finish == FinishReason::Length);
        std::vector<int32_t> seq = prompts[r];
        seq.insert(seq.end(), out[r].tokens.begin(), out[r].tokens.end());
        const std::vector<float> full = full_logits(d, *m.model, seq);
        const std::size_t p = prompts[r].size();
        for (std::size_t t = p - 1; t + 1 < seq.size(); ++t)
            QVERIFY2(argmax(full.data() + t * d.vocab, d.vocab) == seq[t + 1],
                     qPrintable(QString("row %1, position %2: cached greedy chose %3, the full forward's argmax is %4")
                                    .arg(r)
                                    .arg(t)
                                    .arg(seq[t + 1])
                                    .arg(argmax(full.data() + t * d.vocab, d.vocab))));
        // The cached logits themselves, step by step (prefill, then one decode per token).
        Decoder one(d, m.model->layout(), m.model->params(), 1, d.max_positions);
        std::vector<float> lg(static_cast<std::size_t>(d.vocab));
        double worst = 0;
        for (std::size_t t = p - 1; t + 1 < seq.size(); ++t) {
            if (t == p - 1) {
                one.prefill(0, std::span<const int32_t>(seq.data(), p), lg.data());
            } else {
                const int64_t row = 0;
                one.decode(std::span<const int64_t>(&row, 1), std::span<const int32_t>(&seq[t], 1), lg.data());
            }
            for (int64_t v = 0; v < d.vocab; ++v)
                worst = std::max(worst, std::abs(static_cast<double>(lg[v]) - full[t * d.vocab + v]));
        }
        QVERIFY2(worst < 1e-4, qPrintable(QString("row %1: cached logits differ by %2").arg(r).arg(worst)));
    }
}

/// Prefill and decode steps (batch 2) of a model above the one-thread threshold on two threads, as one
/// team per step and as regions per linear layer: the same rows per thread and the same ops, so the
/// same bits.
void check_team_equals_regions(const GptDims& d) {
    const int saved = ops::num_threads();
    ops::set_num_threads(2);
    Model m(d);
    Decoder team(d, m.model->layout(), m.model->params(), 2, d.max_positions);
    Decoder regions(d, m.model->layout(), m.model->params(), 2, d.max_positions);
    team.set_step_threads(Decoder::StepThreads::Team);
    regions.set_step_threads(Decoder::StepThreads::Regions);
    const std::vector<std::vector<int32_t>> prompts = {{5, 17, 3}, {40, 2, 2, 9, 61}};
    std::vector<float> a(static_cast<std::size_t>(2 * d.vocab)), b(a.size());
    int64_t compared = 0;
    for (int64_t r = 0; r < 2; ++r) {
        team.prefill(r, prompts[r], a.data());
        regions.prefill(r, prompts[r], b.data());
        QVERIFY(std::equal(a.begin(), a.begin() + d.vocab, b.begin()));
        ++compared;
    }
    const std::vector<int64_t> rows = {0, 1};
    std::vector<int32_t> next = {7, 11};
    for (int step = 0; step < 6; ++step) {
        // Batch 2, then row 1 alone (batch 1: sgemv instead of sgemm).
        const std::size_t n = step % 2 == 0 ? 2 : 1;
        const auto rs = std::span<const int64_t>(rows.data() + (2 - n), n);
        const auto ts = std::span<const int32_t>(next.data() + (2 - n), n);
        team.decode(rs, ts, a.data());
        regions.decode(rs, ts, b.data());
        QVERIFY2(std::equal(a.begin(), a.begin() + static_cast<int64_t>(n) * d.vocab, b.begin()),
                 qPrintable(QString("decode step %1: the team's logits differ from the regions'").arg(step)));
        compared += static_cast<int64_t>(n);
        next[0] = static_cast<int32_t>(argmax(a.data(), d.vocab));
        next[1] = static_cast<int32_t>(argmax(a.data() + (n - 1) * d.vocab, d.vocab));
    }
    ops::set_num_threads(saved);
    QCOMPARE(compared, int64_t{11});
}

/// The filtered softmax, written from its definition: p ∝ exp(l/T) over the k largest, then the
/// smallest most-likely-first prefix with mass >= top_p, renormalised (float64).
std::vector<double> reference_distribution(const std::vector<float>& logits, double T, int64_t k, double top_p) {
    const int64_t V = static_cast<int64_t>(logits.size());
    std::vector<int64_t> order(static_cast<std::size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
    const int64_t keep_k = k > 0 ? std::min(k, V) : V;
    std::vector<double> p(static_cast<std::size_t>(V), 0.0);
    const auto w = [&](int64_t i) {  // exp((l_i - l_max) / T), in float64
        return std::exp((static_cast<double>(logits[order[i]]) - static_cast<double>(logits[order[0]])) / T);
    };
    double z = 0;
    for (int64_t i = 0; i < keep_k; ++i) z += w(i);
    double mass = 0;
    int64_t keep = keep_k;
    for (int64_t i = 0; i < keep_k; ++i) {
        mass += w(i) / z;
        if (top_p < 1 && mass >= top_p) {
            keep = i + 1;
            break;
        }
    }
    double z2 = 0;
    for (int64_t i = 0; i < keep; ++i) z2 += w(i);
    for (int64_t i = 0; i < keep; ++i) p[order[i]] = w(i) / z2;
    return p;
}

/// Upper critical value of chi-square with `df` degrees of freedom at significance 0.001
/// (Wilson–Hilferty: within 1 % of the tables for df >= 3; z_0.999 = 3.0902).
double chi2_critical_0001(double df) {
    const double a = 2.0 / (9.0 * df);
    return df * std::pow(1.0 - a + 3.0902 * std::sqrt(a), 3.0);
}

}  // namespace

class TestGeneration : public QObject {
    Q_OBJECT
private slots:
    void greedy_matches_full_forward_gpt() { check_greedy_against_full_forward(gpt_dims()); }
    void greedy_matches_full_forward_llama() { check_greedy_against_full_forward(llama_dims()); }
    void greedy_matches_full_forward_on_two_threads() {
        // A model above the one-thread threshold (2M multiply-adds per token): the linear layers split
        // their rows over two threads, the small ops stay on one; the same tokens as on one thread.
        GptDims d = llama_dims();
        d.hidden = 384;
        d.heads = 6;  // head dim 64, 3 key/value groups
        d.groups = 3;
        d.ffn = 1024;
        d.init_std = 0.05f;
        const int saved = ops::num_threads();
        ops::set_num_threads(2);
        check_greedy_against_full_forward(d);
        Model m(d);
        const std::vector<std::vector<int32_t>> prompts = {{5, 17, 3}, {40, 2, 2, 9}};
        GenerateOptions o;
        o.sampling.greedy = true;
        o.max_new_tokens = 10;
        Decoder two(d, m.model->layout(), m.model->params(), 2, d.max_positions);
        const auto a = complete(two, prompts, o);
        ops::set_num_threads(1);
        Decoder one(d, m.model->layout(), m.model->params(), 2, d.max_positions);
        const auto b = complete(one, prompts, o);
        ops::set_num_threads(saved);
        for (std::size_t r = 0; r < prompts.size(); ++r) QCOMPARE(a[r].tokens, b[r].tokens);
    }

    void team_step_equals_region_step() {
        // GPT (learned positions, LayerNorm, GELU, biases) and Llama (RoPE, RMSNorm, SwiGLU, 3 key/value
        // groups split 1 + 2 over the threads) shapes above the one-thread threshold.
        GptDims gpt = gpt_dims();
        gpt.hidden = 384;
        gpt.heads = 6;
        gpt.ffn = 1024;
        gpt.init_std = 0.05f;
        check_team_equals_regions(gpt);
        GptDims llama = llama_dims();
        llama.hidden = 384;
        llama.heads = 6;
        llama.groups = 3;
        llama.ffn = 1024;
        llama.init_std = 0.05f;
        check_team_equals_regions(llama);
    }

    void step_team_meets_every_thread() {
        // Each round every thread writes its slot, meets, checks every slot holds this round, meets
        // again (so nobody writes the next round while another still checks). Three threads on this
        // 2-core machine: some meetings end spinning, others sleeping.
        constexpr int threads = 3, rounds = 5000;
        StepTeam team;
        std::vector<std::atomic<int>> slot(threads);
        std::atomic<int> wrong{0}, team_size{0};
#pragma omp parallel num_threads(threads)
        {
            const int t = omp_get_thread_num(), n = omp_get_num_threads();
            if (t == 0) team_size = n;
            for (int r = 0; r < rounds; ++r) {
                slot[t].store(r, std::memory_order_relaxed);
                team.sync(n);
                for (int u = 0; u < n; ++u)
                    if (slot[u].load(std::memory_order_relaxed) != r) ++wrong;
                team.sync(n);
            }
        }
        QCOMPARE(team_size.load(), threads);
        QCOMPARE(wrong.load(), 0);
    }

    void chi2_critical_matches_tables() {
        // Published values (NIST/SEMATECH e-Handbook, table of the chi-square distribution, 0.999).
        QVERIFY(std::abs(chi2_critical_0001(7) - 24.322) < 0.25);
        QVERIFY(std::abs(chi2_critical_0001(30) - 59.703) < 0.3);
        QVERIFY(std::abs(chi2_critical_0001(100) - 149.449) < 0.5);
    }

    void sampling_follows_filtered_softmax() {
        const GptDims d = llama_dims();
        Model m(d, 11);
        Decoder dec(d, m.model->layout(), m.model->params(), 1, d.max_positions);
        std::vector<float> logits(static_cast<std::size_t>(d.vocab));
        const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
        dec.prefill(0, prompt, logits.data());
        struct Case {
            double T;
            int64_t k;
            double p;
        };
        for (const Case c : {Case{0.7, 8, 1.0}, Case{1.3, 0, 0.8}, Case{1.0, 0, 1.0}, Case{2.0, 20, 0.9}}) {
            const std::vector<double> ref = reference_distribution(logits, c.T, c.k, c.p);
            SamplingParams sp;
            sp.temperature = c.T;
            sp.top_k = c.k;
            sp.top_p = c.p;
            sp.seed = 2024;
            // The engine's distribution itself, then its draws.
            const auto dist = filtered_distribution(logits.data(), d.vocab, sp);
            double covered = 0;
            for (const auto& [id, prob] : dist) {
                QVERIFY2(std::abs(prob - ref[id]) < 1e-12, qPrintable(QString("T=%1 k=%2 p=%3 token %4: %5 vs %6")
                                                                          .arg(c.T)
                                                                          .arg(c.k)
                                                                          .arg(c.p)
                                                                          .arg(id)
                                                                          .arg(prob, 0, 'g', 17)
                                                                          .arg(ref[id], 0, 'g', 17)));
                covered += ref[id];
            }
            QVERIFY(std::abs(covered - 1.0) < 1e-12);
            Sampler s(sp, 0);
            const int draws = 20000;
            std::vector<int64_t> count(static_cast<std::size_t>(d.vocab), 0);
            for (int i = 0; i < draws; ++i) ++count[s.next(logits.data(), d.vocab)];
            // Cells with an expected count below 5 are pooled (the usual validity rule).
            double chi2 = 0, pooled_e = 0, pooled_o = 0;
            int cells = 0;
            for (int64_t v = 0; v < d.vocab; ++v) {
                if (ref[v] == 0) {
                    QVERIFY2(count[v] == 0, qPrintable(QString("token %1 is outside the filtered support").arg(v)));
                    continue;
                }
                const double e = ref[v] * draws;
                if (e < 5) {
                    pooled_e += e;
                    pooled_o += static_cast<double>(count[v]);
                    continue;
                }
                chi2 += (count[v] - e) * (count[v] - e) / e;
                ++cells;
            }
            if (pooled_e > 0) {
                chi2 += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
                ++cells;
            }
            QVERIFY(cells >= 4);
            const double critical = chi2_critical_0001(cells - 1);
            QVERIFY2(chi2 < critical, qPrintable(QString("T=%1 k=%2 p=%3: chi2 %4 over %5 cells, critical %6")
                                                     .arg(c.T)
                                                     .arg(c.k)
                                                     .arg(c.p)
                                                     .arg(chi2)
                                                     .arg(cells)
                                                     .arg(critical)));
        }
    }

    void same_seed_same_text() {
        const GptDims d = gpt_dims();
        Model m(d);
        const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {9, 8}, {50, 51, 52, 53}};
        Decoder dec(d, m.model->layout(), m.model->params(), 3, d.max_positions);
        GenerateOptions o;
        o.sampling = {false, 1.0, 0, 0.95, 42};
        o.max_new_tokens = 16;
        const auto a = complete(dec, prompts, o);
        const auto b = complete(dec, prompts, o);
        o.sampling.seed = 43;
        const auto c = complete(dec, prompts, o);
        bool differs = false;
        for (std::size_t r = 0; r < prompts.size(); ++r) {
            QCOMPARE(a[r].tokens, b[r].tokens);
            differs |= a[r].tokens != c[r].tokens;
        }
        QVERIFY(differs);
        // A prompt alone (its own stream index) gives the text it gives inside the batch.
        Decoder single(d, m.model->layout(), m.model->params(), 1, d.max_positions);
        o.sampling.seed = 42;
        o.first_stream = 2;
        QCOMPARE(complete(single, {prompts[2]}, o)[0].tokens, a[2].tokens);
    }

    void eos_stops_a_row() {
        const GptDims d = gpt_dims();
        Model m(d);
        const std::vector<std::vector<int32_t>> prompts = {{5, 17, 3}, {40, 2}};
        Decoder dec(d, m.model->layout(), m.model->params(), 2, d.max_positions);
        GenerateOptions o;
        o.sampling.greedy = true;
        o.max_new_tokens = 10;
        const auto free_run = complete(dec, prompts, o);
        o.eos = free_run[0].tokens[3];
        const auto first = std::find(free_run[0].tokens.begin(), free_run[0].tokens.end(), o.eos);
        const auto stopped = complete(dec, prompts, o);
        QVERIFY(stopped[0].finish == FinishReason::Eos);
        QCOMPARE(stopped[0].tokens, std::vector<int32_t>(free_run[0].tokens.begin(), first));
        std::vector<int32_t> streamed;
        complete(dec, prompts, o, [&](int64_t r, int32_t t) {
            if (r == 0) streamed.push_back(t);
        });
        QCOMPARE(streamed, stopped[0].tokens);
    }

    void context_limits_length_and_refuses_full_prompts() {
        const GptDims d = gpt_dims();
        Model m(d);
        Decoder dec(d, m.model->layout(), m.model->params(), 1, 10);
        GenerateOptions o;
        o.sampling.greedy = true;
        o.max_new_tokens = 50;
        const auto out = complete(dec, {{1, 2, 3, 4, 5, 6}}, o);
        QCOMPARE(out[0].tokens.size(), std::size_t{4});
        QVERIFY(out[0].finish == FinishReason::Length);
        QVERIFY_THROWS_EXCEPTION(mwb::Error, complete(dec, {std::vector<int32_t>(10, 1)}, o));
    }

    void text_stream_waits_for_whole_characters() {
        const data::ByteTokenizer tok;
        TextStream s(tok);
        const std::string e_acute = "\xC3\xA9", euro = "\xE2\x82\xAC";
        QCOMPARE(s.push('a'), std::string("a"));
        QCOMPARE(s.push(0xC3), std::string());
        QCOMPARE(s.push(0xA9), e_acute);
        QCOMPARE(s.push(0xE2), std::string());
        QCOMPARE(s.push(0x82), std::string());
        QCOMPARE(s.push(0xAC), euro);
        QCOMPARE(s.push(0xF0), std::string());
        QCOMPARE(s.flush(), std::string("\xF0"));
        QCOMPARE(valid_utf8("ok\xF0"), std::string("ok\xEF\xBF\xBD"));
    }

    void text_stream_continues_its_prompt() {
        // A completion printed after its prompt reads as decode(prompt + completion): the NullTokenizer's
        // space between prompt and first token comes from decoding them together (alone, "8" has none).
        const data::NullTokenizer tok(100, 99);
        const std::vector<int32_t> prompt = {5, 6, 7}, completion = {8, 42, 0};
        TextStream s(tok, prompt);
        std::string printed = s.context_text();
        QCOMPARE(printed, std::string("5 6 7"));
        for (const int32_t t : completion) printed += s.push(t);
        printed += s.flush();
        std::vector<int32_t> all = prompt;
        all.insert(all.end(), completion.begin(), completion.end());
        QCOMPARE(printed, tok.decode(all));
        QCOMPARE(printed, std::string("5 6 7 8 42 0"));
        // Bytes: an unfinished character at the prompt's end waits for the token that completes it.
        const data::ByteTokenizer bytes;
        TextStream b(bytes, std::vector<int32_t>{'a', 0xC3});
        QCOMPARE(b.context_text(), std::string("a"));
        QCOMPARE(b.push(0xA9), std::string("\xC3\xA9"));
    }
};

MWB_TEST_SUITE_APPLESS(test_generate_engine, TestGeneration)
}  // namespace test_generate_engine
#include "test_generation.moc"
