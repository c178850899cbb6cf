#include "backend/config/validate.h"
#include "backend/config/null_vocabulary.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

namespace mwb {

namespace {

class Checker {
public:
    template <typename... Args>
    void require(bool ok, const char* field, fmt::format_string<Args...> message, Args&&... args) {
        if (!ok) issues.push_back({field, fmt::format(message, std::forward<Args>(args)...)});
    }
    std::vector<ConfigIssue> issues;
};

bool parse_split(const std::string& split, std::vector<double>& parts) {
    std::stringstream ss(split);
    std::string item;
    while (std::getline(ss, item, ',')) {
        try {
            std::size_t used = 0;
            const double v = std::stod(item, &used);
            while (used < item.size() && item[used] == ' ') ++used;
            if (used != item.size() || v < 0) return false;
            parts.push_back(v);
        } catch (const std::logic_error&) {
            return false;
        }
    }
    return !parts.empty() && parts.size() <= 3;
}

struct BatchRamp {
    int64_t start = 0, increment = 0, samples = 0;
};

/// rampup_batch_size as three positive integers; returns an error message or "".
std::string parse_rampup(const TrainingConfig& t, BatchRamp& r) {
    if (t.rampup_batch_size.size() != 3)
        return fmt::format("rampup_batch_size takes three integers START INCREMENT SAMPLES (got {})",
                           t.rampup_batch_size.size());
    int64_t* out[3] = {&r.start, &r.increment, &r.samples};
    for (int i = 0; i < 3; ++i) {
        const std::string& v = t.rampup_batch_size[static_cast<std::size_t>(i)];
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), *out[i]);
        if (ec != std::errc() || end != v.data() + v.size() || *out[i] < 1)
            return fmt::format("rampup_batch_size: \"{}\" is not a positive integer", v);
    }
    return "";
}

/// "THRESHOLD:BATCH ..." with K/M/B/T suffixes, thresholds in tokens (divided by seq_length, as
/// Megatron-LM does when it knows the sequence length) sorted ascending; returns an error or "".
std::string parse_step_schedule(const std::string& text, int64_t seq_length,
                                std::vector<std::pair<int64_t, int64_t>>& steps) {
    std::string norm = text;
    std::replace(norm.begin(), norm.end(), ',', ' ');
    std::stringstream ss(norm);
    std::string entry;
    const auto number = [](std::string v, int64_t& out) {
        double mult = 1;
        if (!v.empty()) {
            const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(v.back())));
            mult = c == 'T' ? 1e12 : c == 'B' ? 1e9 : c == 'M' ? 1e6 : c == 'K' ? 1e3 : 1;
            if (mult != 1) v.pop_back();
        }
        try {
            std::size_t used = 0;
            const double d = std::stod(v, &used);
            if (used != v.size() || !std::isfinite(d) || d < 0) return false;
            out = static_cast<int64_t>(d * mult);
            return true;
        } catch (const std::logic_error&) {
            return false;
        }
    };
    while (ss >> entry) {
        const std::size_t colon = entry.find(':');
        int64_t threshold = 0, batch = 0;
        if (colon == std::string::npos || !number(entry.substr(0, colon), threshold) ||
            !number(entry.substr(colon + 1), batch) || batch < 1)
            return fmt::format("step_batch_size_schedule: \"{}\" is not THRESHOLD:BATCH_SIZE", entry);
        steps.emplace_back(seq_length > 0 ? threshold / seq_length : threshold, batch);
    }
    std::sort(steps.begin(), steps.end());
    if (steps.empty() || steps.front().first != 0)
        return "step_batch_size_schedule must start with a threshold of 0";
    for (std::size_t i = 1; i < steps.size(); ++i)
        if (steps[i].first == steps[i - 1].first)
            return "step_batch_size_schedule's thresholds must be strictly increasing";
    return "";
}

/// Every global batch size the schedule can take (for divisibility checks).
std::vector<int64_t> scheduled_batch_sizes(const Config& c) {
    std::vector<int64_t> sizes;
    std::vector<std::pair<int64_t, int64_t>> steps;
    BatchRamp r;
    if (!c.training.step_batch_size_schedule.empty() &&
        parse_step_schedule(c.training.step_batch_size_schedule, c.model.seq_length, steps).empty())
        for (const auto& s : steps) sizes.push_back(s.second);
    else if (!c.training.rampup_batch_size.empty() && parse_rampup(c.training, r).empty())
        for (int64_t b = r.start; b < c.training.global_batch_size && r.increment > 0; b += r.increment)
            sizes.push_back(b);
    return sizes;
}

/// enable_cuda_graph: a graph per micro-batch count whose every host interaction is before its launch
/// or after its end (docs/gpu.md, "CUDA graph of the training step"). Tensor, data and pipeline
/// parallelism capture their NCCL calls (the pipeline's schedule is host-static and its receives wait
/// on the GPU); batch ramps get a graph per count. What stays refused is what a capture cannot hold.
void validate_cuda_graph(Checker& ck, const Config& c) {
    const auto& r = c.runtime;
    ck.require(r.cuda_graph_warmup_steps >= 1, "cuda_graph_warmup_steps",
               "cuda_graph_warmup_steps must be at least 1 (got {}): the allocator, the scratch areas, the "
               "cuBLASLt/cuDNN plans and NCCL's connections reach their sizes in eager steps before a capture",
               r.cuda_graph_warmup_steps);
}

}  // namespace

std::vector<std::string> resolve(Config& c, int world_size, int64_t tokenizer_vocab) {
    std::vector<std::string> notes;
    auto& m = c.model;
    auto& t = c.training;
    // Megatron-LM's defaults: a SwiGLU MLP keeps the 4h MLP's parameter count (2/3 of 8h, rounded down
    // to a multiple of 64); without grouped-query attention every query head has its own K/V head.
    if (m.ffn_hidden_size == 0) m.ffn_hidden_size = m.swiglu ? (8 * m.hidden_size / 3) / 64 * 64 : 4 * m.hidden_size;
    // Megatron-LM's --attention-backend names: fused is Transformer Engine's cuDNN attention; flash,
    // unfused and local are kernels of its own, as ours are.
    if (auto& b = c.runtime.attention_backend; b == "fused" || b == "flash" || b == "unfused" || b == "local") {
        const std::string ours = b == "fused" ? "cudnn" : "own";
        notes.push_back(fmt::format("attention_backend {} (Megatron-LM's name) runs as {}", b, ours));
        b = ours;
    }
    if (c.runtime.attention_backend == "cudnn" && c.runtime.device == "cpu")
        notes.push_back("attention_backend cudnn: no effect on the CPU, which has one attention implementation");
    if (c.runtime.enable_cuda_graph && c.runtime.device == "cpu")
        notes.push_back("enable_cuda_graph: no effect on the CPU, which has no graphs (every step runs eagerly)");
    if (!m.group_query_attention) {
        if (m.num_query_groups != 1 && m.num_query_groups != m.num_attention_heads)
            notes.push_back(fmt::format("num_query_groups ({}) has no effect without group_query_attention: every "
                                        "query head gets its own key/value head",
                                        m.num_query_groups));
        m.num_query_groups = m.num_attention_heads;
    }
    // Left 0 when the heads do not divide hidden_size, so that validate() names that.
    if (m.kv_channels == 0 && m.num_attention_heads > 0 && m.hidden_size % m.num_attention_heads == 0)
        m.kv_channels = m.hidden_size / m.num_attention_heads;
    if (m.max_position_embeddings == 0) m.max_position_embeddings = m.seq_length;
    if (tokenizer_vocab > 0 && c.data.tokenizer_type != "NullTokenizer") m.vocab_size = static_cast<int>(tokenizer_vocab);
    const int tp_pp = std::max(1, c.parallel.tensor_model_parallel_size) * std::max(1, c.parallel.pipeline_model_parallel_size);
    const int dp = world_size % tp_pp == 0 ? world_size / tp_pp : 1;
    std::vector<std::pair<int64_t, int64_t>> steps;
    if (t.global_batch_size == 0 && !t.step_batch_size_schedule.empty() &&
        parse_step_schedule(t.step_batch_size_schedule, m.seq_length, steps).empty())
        t.global_batch_size = static_cast<int>(steps.back().second);  // as Megatron-LM: the last step's
    if (t.global_batch_size == 0) t.global_batch_size = t.micro_batch_size * dp;
    if (t.train_samples > 0 && t.train_iters == 0) {
        t.train_iters = iterations_for_samples(c);
        notes.push_back(fmt::format("train_samples {}: {} iterations", t.train_samples, t.train_iters));
    }
    if (t.train_samples > 0) {  // sample-based: the schedule is in samples
        if (t.lr_decay_samples == 0) t.lr_decay_samples = t.train_samples;
    } else if (t.lr_decay_iters == 0) {
        t.lr_decay_iters = t.train_iters;
    }
    if (t.bf16 && !t.accumulate_allreduce_grads_in_fp32) t.accumulate_allreduce_grads_in_fp32 = true;
    if (c.parallel.sequence_parallel && c.parallel.tensor_model_parallel_size == 1) {
        c.parallel.sequence_parallel = false;
        notes.emplace_back("sequence_parallel has no effect with tensor_model_parallel_size 1: turned off");
    }
    return notes;
}

std::vector<ConfigIssue> validate(const Config& c, int world_size) {
    Checker ck;
    const auto& m = c.model;
    const auto& p = c.parallel;
    const auto& t = c.training;
    const auto& d = c.data;
    const auto& l = c.logging;

    // every float is finite (inf and nan train to nothing)
    for (const Field& f : config_fields()) {
        const FieldRef ref = f.ref(c);
        if (const auto* v = std::get_if<double*>(&ref))
            ck.require(std::isfinite(**v), f.name.data(), "{} must be a finite number (got {})", f.name, **v);
    }

    // model: what Megatron-LM requires is named with its flag when missing
    const auto required = [&](int64_t v, const char* field, const char* flag) {
        if (v == 0) ck.require(false, field, "{} is required ({} N); Megatron-LM has no default", field, flag);
        else ck.require(v >= 1, field, "{} must be at least 1 (got {})", field, v);
    };
    required(m.num_layers, "num_layers", "--num-layers");
    required(m.hidden_size, "hidden_size", "--hidden-size");
    required(m.num_attention_heads, "num_attention_heads", "--num-attention-heads");
    required(m.seq_length, "seq_length", "--seq-length");
    // kv_channels 0 (unresolved) means hidden_size / num_attention_heads, which must then divide; an explicit
    // head dim needs no divisibility (Megatron-LM's rule). Query groups matter only with group_query_attention
    // (resolve() gives every head its own group otherwise).
    const int kv_channels = m.kv_channels > 0 ? m.kv_channels
                            : m.num_attention_heads >= 1 ? m.hidden_size / m.num_attention_heads
                                                         : 0;
    if (m.kv_channels == 0 && m.hidden_size >= 1 && m.num_attention_heads >= 1)
        ck.require(m.hidden_size % m.num_attention_heads == 0, "num_attention_heads",
                   "hidden_size ({}) must be divisible by num_attention_heads ({}), or set kv_channels", m.hidden_size,
                   m.num_attention_heads);
    ck.require(m.kv_channels >= 0, "kv_channels", "kv_channels must not be negative (got {})", m.kv_channels);
    const bool gqa = m.group_query_attention;
    if (gqa) {
        ck.require(m.num_query_groups >= 1, "num_query_groups", "num_query_groups must be at least 1 (got {})",
                   m.num_query_groups);
        if (m.num_query_groups >= 1 && m.num_attention_heads >= 1)
            ck.require(m.num_attention_heads % m.num_query_groups == 0, "num_query_groups",
                       "num_attention_heads ({}) must be divisible by num_query_groups ({})", m.num_attention_heads,
                       m.num_query_groups);
    }
    const bool rope = m.position_embedding_type == "rope";
    ck.require(m.rotary_percent > 0 && m.rotary_percent <= 1, "rotary_percent",
               "rotary_percent must be in (0, 1] (got {})", m.rotary_percent);
    if (rope && kv_channels >= 1 && m.rotary_percent > 0 && m.rotary_percent <= 1) {
        const int rotary_dim = static_cast<int>(kv_channels * m.rotary_percent);
        ck.require(rotary_dim >= 2 && rotary_dim % 2 == 0, "rotary_percent",
                   "RoPE rotates kv_channels ({}) x rotary_percent ({}) = {} dims of each head, which must be even "
                   "and at least 2",
                   kv_channels, m.rotary_percent, rotary_dim);
    }
    ck.require(m.rotary_base >= 1, "rotary_base", "rotary_base must be at least 1 (got {})", m.rotary_base);
    ck.require(!m.use_rope_scaling || rope, "use_rope_scaling",
               "use_rope_scaling needs position_embedding_type rope (got {})", m.position_embedding_type);
    ck.require(m.rope_scaling_factor >= 1, "rope_scaling_factor", "rope_scaling_factor must be at least 1 (got {})",
               m.rope_scaling_factor);
    if (m.hidden_size >= 1)  // else 0 = 4 x hidden_size, and hidden_size is what is missing
        ck.require(m.ffn_hidden_size >= 1, "ffn_hidden_size", "ffn_hidden_size must be at least 1 (got {})",
                   m.ffn_hidden_size);
    ck.require(m.position_embedding_type == "none" || m.max_position_embeddings >= m.seq_length,
               "max_position_embeddings", "max_position_embeddings ({}) must be at least seq_length ({}) with {} positions",
               m.max_position_embeddings, m.seq_length, m.position_embedding_type);
    if (c.data.tokenizer_type == "NullTokenizer" && m.vocab_size >= 1) {
        const NullVocabulary v = null_tokenizer_vocabulary(c.data, m);
        ck.require(!c.data.null_tokenizer_legacy_eod || c.data.null_tokenizer_eod_id == -1, "null_tokenizer_eod_id",
                   "null_tokenizer_eod_id ({}) cannot be combined with null_tokenizer_legacy_eod (EOD is vocab_size "
                   "there)",
                   c.data.null_tokenizer_eod_id);
        ck.require(v.eod >= 0 && v.eod < v.size, "null_tokenizer_eod_id",
                   "null_tokenizer_eod_id ({}) must be -1 or an id in [0, vocab_size = {})", c.data.null_tokenizer_eod_id,
                   v.size);
    }
    ck.require(model_vocab_size(c) >= 2, "vocab_size", "the vocabulary must hold at least 2 ids (got {}); set vocab_size for NullTokenizer",
               model_vocab_size(c));
    ck.require(m.make_vocab_size_divisible_by >= 1, "make_vocab_size_divisible_by",
               "make_vocab_size_divisible_by must be at least 1 (got {})", m.make_vocab_size_divisible_by);
    ck.require(m.layernorm_epsilon > 0, "layernorm_epsilon", "layernorm_epsilon must be positive (got {})",
               m.layernorm_epsilon);
    ck.require(m.hidden_dropout >= 0 && m.hidden_dropout < 1, "hidden_dropout",
               "hidden_dropout must be in [0, 1) (got {})", m.hidden_dropout);
    ck.require(m.attention_dropout >= 0 && m.attention_dropout < 1, "attention_dropout",
               "attention_dropout must be in [0, 1) (got {})", m.attention_dropout);
    ck.require(m.init_method_std > 0, "init_method_std", "init_method_std must be positive (got {})",
               m.init_method_std);

    // parallel layout
    const int tp = p.tensor_model_parallel_size, pp = p.pipeline_model_parallel_size;
    ck.require(tp >= 1, "tensor_model_parallel_size", "tensor_model_parallel_size must be at least 1 (got {})", tp);
    ck.require(pp >= 1, "pipeline_model_parallel_size", "pipeline_model_parallel_size must be at least 1 (got {})",
               pp);
    if (tp >= 1 && pp >= 1) {
        ck.require(world_size % (tp * pp) == 0, "tensor_model_parallel_size",
                   "tensor_model_parallel_size ({}) x pipeline_model_parallel_size ({}) = {} must divide the number "
                   "of ranks ({}); start {} x data-parallel-size processes (mpirun -np N)",
                   tp, pp, tp * pp, world_size, tp * pp);
        if (m.num_attention_heads >= 1)
            ck.require(m.num_attention_heads % tp == 0, "num_attention_heads",
                       "num_attention_heads ({}) must be divisible by tensor_model_parallel_size ({})",
                       m.num_attention_heads, tp);
        if (gqa && m.num_query_groups >= 1)
            ck.require(m.num_query_groups % tp == 0, "num_query_groups",
                       "num_query_groups ({}) must be divisible by tensor_model_parallel_size ({}): each tensor-parallel "
                       "rank holds whole key/value heads",
                       m.num_query_groups, tp);
        if (m.ffn_hidden_size >= 1)
            ck.require(m.ffn_hidden_size % tp == 0, "ffn_hidden_size",
                       "ffn_hidden_size ({}) must be divisible by tensor_model_parallel_size ({})", m.ffn_hidden_size,
                       tp);
        if (m.num_layers >= 1)
            ck.require(m.num_layers % pp == 0, "pipeline_model_parallel_size",
                       "num_layers ({}) must be divisible by pipeline_model_parallel_size ({})", m.num_layers, pp);
        if (p.sequence_parallel)
            ck.require(m.seq_length % tp == 0, "sequence_parallel",
                       "sequence_parallel needs seq_length ({}) divisible by tensor_model_parallel_size ({})",
                       m.seq_length, tp);
        if (p.num_layers_per_virtual_pipeline_stage > 0) {
            ck.require(pp > 1, "num_layers_per_virtual_pipeline_stage",
                       "num_layers_per_virtual_pipeline_stage needs pipeline_model_parallel_size > 1");
            const int per_stage = m.num_layers >= 1 ? m.num_layers / pp : 0;
            ck.require(per_stage % p.num_layers_per_virtual_pipeline_stage == 0,
                       "num_layers_per_virtual_pipeline_stage",
                       "layers per pipeline stage ({}) must be divisible by num_layers_per_virtual_pipeline_stage "
                       "({})",
                       per_stage, p.num_layers_per_virtual_pipeline_stage);
        }
    }
    ck.require(p.num_layers_per_virtual_pipeline_stage >= 0, "num_layers_per_virtual_pipeline_stage",
               "num_layers_per_virtual_pipeline_stage must not be negative");
    ck.require(p.ddp_bucket_size >= 0, "ddp_bucket_size", "ddp_bucket_size must not be negative");
    ck.require(std::isfinite(p.distributed_timeout_minutes) && p.distributed_timeout_minutes > 0,
               "distributed_timeout_minutes", "distributed_timeout_minutes must be a positive number of minutes (got {})",
               p.distributed_timeout_minutes);

    // batch
    ck.require(t.micro_batch_size >= 1, "micro_batch_size", "micro_batch_size must be at least 1 (got {})",
               t.micro_batch_size);
    if (t.micro_batch_size >= 1 && tp >= 1 && pp >= 1 && world_size % (tp * pp) == 0) {
        const int dp = world_size / (tp * pp);
        ck.require(t.global_batch_size >= 1 && t.global_batch_size % (t.micro_batch_size * dp) == 0,
                   "global_batch_size",
                   "global_batch_size ({}) must be a positive multiple of micro_batch_size ({}) x data-parallel size "
                   "({})",
                   t.global_batch_size, t.micro_batch_size, dp);
    }

    if (p.num_layers_per_virtual_pipeline_stage > 0 && pp > 1 && t.micro_batch_size >= 1 && tp >= 1 &&
        world_size % (tp * pp) == 0 && t.global_batch_size % (t.micro_batch_size * (world_size / (tp * pp))) == 0) {
        const int64_t micro = t.global_batch_size / (t.micro_batch_size * (world_size / (tp * pp)));
        ck.require(micro % pp == 0, "num_layers_per_virtual_pipeline_stage",
                   "the interleaved schedule needs the number of micro-batches ({}) to be a multiple of "
                   "pipeline_model_parallel_size ({}); raise global_batch_size",
                   micro, pp);
    }

    // batch schedule
    if (!t.rampup_batch_size.empty()) {
        BatchRamp r;
        const std::string err = parse_rampup(t, r);
        ck.require(err.empty(), "rampup_batch_size", "{}", err);
        ck.require(t.step_batch_size_schedule.empty(), "rampup_batch_size",
                   "rampup_batch_size and step_batch_size_schedule cannot both be set");
        if (err.empty())
            ck.require(r.start < t.global_batch_size && (t.global_batch_size - r.start) % r.increment == 0,
                       "rampup_batch_size",
                       "rampup_batch_size: START ({}) must be below global_batch_size ({}) and reach it in steps of "
                       "INCREMENT ({})",
                       r.start, t.global_batch_size, r.increment);
    }
    if (!t.step_batch_size_schedule.empty()) {
        std::vector<std::pair<int64_t, int64_t>> steps;
        const std::string err = parse_step_schedule(t.step_batch_size_schedule, m.seq_length, steps);
        ck.require(err.empty(), "step_batch_size_schedule", "{}", err);
        if (err.empty())
            ck.require(t.global_batch_size == steps.back().second, "step_batch_size_schedule",
                       "step_batch_size_schedule and global_batch_size ({}) cannot both be set (Megatron-LM refuses "
                       "it too): the schedule's last batch size is the global batch size",
                       t.global_batch_size);
    }
    if (t.micro_batch_size >= 1 && tp >= 1 && pp >= 1 && world_size % (tp * pp) == 0) {
        const int64_t unit = static_cast<int64_t>(t.micro_batch_size) * (world_size / (tp * pp));
        for (const int64_t b : scheduled_batch_sizes(c)) {
            ck.require(b % unit == 0, "global_batch_size",
                       "the scheduled global batch size {} must be a multiple of micro_batch_size ({}) x "
                       "data-parallel size ({})",
                       b, t.micro_batch_size, unit / t.micro_batch_size);
            if (p.num_layers_per_virtual_pipeline_stage > 0 && pp > 1 && b % unit == 0)
                ck.require((b / unit) % pp == 0, "num_layers_per_virtual_pipeline_stage",
                           "the interleaved schedule needs every number of micro-batches ({} at batch {}) to be a "
                           "multiple of pipeline_model_parallel_size ({})",
                           b / unit, b, pp);
            if (b % unit != 0) break;
        }
    }

    // optimisation
    const bool by_samples = t.train_samples > 0;
    if (t.train_iters == 0 && t.train_samples == 0)
        ck.require(false, "train_iters", "train_iters (--train-iters N) or train_samples (--train-samples N) is "
                                         "required; Megatron-LM has no default");
    else
        ck.require(t.train_iters >= 1, "train_iters", "train_iters must be at least 1 (got {}{})", t.train_iters,
                   by_samples ? fmt::format(" from train_samples {}", t.train_samples) : "");
    ck.require(t.train_samples >= 0, "train_samples", "train_samples must not be negative");
    if (by_samples) {
        ck.require(t.train_iters == iterations_for_samples(c), "train_samples",
                   "train_iters and train_samples cannot both be set: train by iterations or by samples");
        ck.require(t.lr_decay_iters == 0, "lr_decay_iters",
                   "lr_decay_iters is for iteration-based training; with train_samples give lr_decay_samples");
        ck.require(t.lr_warmup_iters == 0, "lr_warmup_iters",
                   "lr_warmup_iters is for iteration-based training; with train_samples give lr_warmup_samples");
        ck.require(t.lr_wsd_decay_iters == 0, "lr_wsd_decay_iters",
                   "lr_wsd_decay_iters is for iteration-based training; with train_samples give lr_wsd_decay_samples");
    } else {
        ck.require(t.lr_decay_samples == 0, "lr_decay_samples",
                   "lr_decay_samples is for sample-based training (train_samples); give lr_decay_iters");
        ck.require(t.lr_warmup_samples == 0, "lr_warmup_samples",
                   "lr_warmup_samples is for sample-based training (train_samples); give lr_warmup_iters");
        ck.require(t.lr_wsd_decay_samples == 0, "lr_wsd_decay_samples",
                   "lr_wsd_decay_samples is for sample-based training (train_samples); give lr_wsd_decay_iters");
    }
    if (t.lr == kLrNotGiven) {
        ck.require(false, "lr", "lr is required (--lr X); Megatron-LM has no default");
    } else {
        ck.require(t.lr >= 0, "lr", "lr must not be negative (got {})", t.lr);
        ck.require(t.min_lr >= 0 && t.min_lr <= t.lr, "min_lr", "min_lr ({}) must be in [0, lr ({})]", t.min_lr, t.lr);
        ck.require(t.lr_warmup_init >= 0 && t.lr_warmup_init <= t.lr, "lr_warmup_init",
                   "lr_warmup_init ({}) must be in [0, lr ({})]", t.lr_warmup_init, t.lr);
    }
    ck.require(t.lr_warmup_iters >= 0, "lr_warmup_iters", "lr_warmup_iters must not be negative");
    ck.require(t.lr_warmup_samples >= 0, "lr_warmup_samples", "lr_warmup_samples must not be negative");
    ck.require(t.lr_warmup_fraction >= 0 && t.lr_warmup_fraction < 1, "lr_warmup_fraction",
               "lr_warmup_fraction must be in [0, 1) (got {})", t.lr_warmup_fraction);
    ck.require(t.lr_warmup_fraction == 0 || (t.lr_warmup_iters == 0 && t.lr_warmup_samples == 0),
               "lr_warmup_fraction", "give one of lr_warmup_fraction and lr_warmup_{}", by_samples ? "samples" : "iters");
    const int64_t decay = by_samples ? t.lr_decay_samples : t.lr_decay_iters;
    const char* decay_name = by_samples ? "lr_decay_samples" : "lr_decay_iters";
    const int64_t warmup = by_samples ? t.lr_warmup_samples : t.lr_warmup_iters;
    const bool length_known = t.train_iters >= 1;  // else the decay defaults to what is missing
    if (length_known) ck.require(decay >= 1, decay_name, "{} must be at least 1 (got {})", decay_name, decay);
    // As Megatron-LM (OptimizerParamScheduler): the warm-up ends before the decay does.
    ck.require(!length_known || t.lr_warmup_fraction > 0 || warmup < decay || t.lr_decay_style == "constant",
               by_samples ? "lr_warmup_samples" : "lr_warmup_iters",
               "{} ({}) must be less than {} ({}{}): lower the warm-up or train longer",
               by_samples ? "lr_warmup_samples" : "lr_warmup_iters", warmup, decay_name, decay,
               !by_samples && t.lr_decay_iters == t.train_iters ? ", which defaults to train_iters" : "");
    if (t.lr_decay_style == "WSD") {
        const int64_t wsd = by_samples ? t.lr_wsd_decay_samples : t.lr_wsd_decay_iters;
        const char* wsd_name = by_samples ? "lr_wsd_decay_samples" : "lr_wsd_decay_iters";
        ck.require(wsd >= 1 && wsd <= decay, wsd_name, "lr_decay_style WSD needs {} in [1, {} ({})] (got {})", wsd_name,
                   decay_name, decay, wsd);
    }
    ck.require(t.weight_decay >= 0, "weight_decay", "weight_decay must not be negative (got {})", t.weight_decay);
    if (t.weight_decay_incr_style == "constant") {
        ck.require(t.start_weight_decay == 0 && t.end_weight_decay == 0, "start_weight_decay",
                   "start_weight_decay and end_weight_decay are for weight_decay_incr_style linear or cosine "
                   "(constant uses weight_decay)");
    } else {
        ck.require(t.start_weight_decay >= 0 && t.end_weight_decay >= t.start_weight_decay, "end_weight_decay",
                   "weight_decay_incr_style {} needs 0 <= start_weight_decay ({}) <= end_weight_decay ({})",
                   t.weight_decay_incr_style, t.start_weight_decay, t.end_weight_decay);
    }
    ck.require(t.adam_beta1 >= 0 && t.adam_beta1 < 1, "adam_beta1", "adam_beta1 must be in [0, 1) (got {})",
               t.adam_beta1);
    ck.require(t.adam_beta2 >= 0 && t.adam_beta2 < 1, "adam_beta2", "adam_beta2 must be in [0, 1) (got {})",
               t.adam_beta2);
    ck.require(t.adam_eps > 0, "adam_eps", "adam_eps must be positive (got {})", t.adam_eps);
    ck.require(t.clip_grad >= 0, "clip_grad", "clip_grad must not be negative (got {})", t.clip_grad);

    // recompute
    const int per_stage = pp >= 1 && m.num_layers >= 1 ? m.num_layers / pp : m.num_layers;
    if (t.recompute_granularity == "full") {
        ck.require(!t.recompute_method.empty(), "recompute_method",
                   "recompute_granularity full needs recompute_method uniform or block");
        ck.require(t.recompute_num_layers >= 1, "recompute_num_layers",
                   "recompute_granularity full needs recompute_num_layers >= 1 (got {})", t.recompute_num_layers);
        if (t.recompute_method == "block")
            ck.require(t.recompute_num_layers <= per_stage, "recompute_num_layers",
                       "recompute_num_layers ({}) exceeds the layers per pipeline stage ({})", t.recompute_num_layers,
                       per_stage);
    } else {
        ck.require(t.recompute_method.empty(), "recompute_method",
                   "recompute_method ({}) is only used with recompute_granularity full", t.recompute_method);
        ck.require(t.recompute_num_layers == 0, "recompute_num_layers",
                   "recompute_num_layers is only used with recompute_granularity full");
    }

    ck.require(t.logits_chunk_bytes >= 0, "logits_chunk_bytes", "logits_chunk_bytes must not be negative (got {})",
               t.logits_chunk_bytes);

    // precision
    ck.require(!(t.bf16 && t.fp16), "fp16", "bf16 and fp16 cannot both be set");
    ck.require(t.loss_scale >= 0, "loss_scale", "loss_scale must not be negative (got {})", t.loss_scale);
    ck.require(t.initial_loss_scale > 0, "initial_loss_scale", "initial_loss_scale must be positive");
    ck.require(t.min_loss_scale > 0 && t.min_loss_scale <= t.initial_loss_scale, "min_loss_scale",
               "min_loss_scale ({}) must be in (0, initial_loss_scale ({})]", t.min_loss_scale,
               t.initial_loss_scale);
    ck.require(t.loss_scale_window >= 1, "loss_scale_window", "loss_scale_window must be at least 1");
    ck.require(t.hysteresis >= 1, "hysteresis", "hysteresis must be at least 1");

    // data
    ck.require(!(d.mock_data && !d.data_path.empty()), "mock_data", "mock_data and data_path cannot both be set");
    if (d.tokenizer_type == "GPT2BPETokenizer") {
        ck.require(!d.vocab_file.empty(), "vocab_file", "GPT2BPETokenizer needs vocab_file (vocab.json)");
        ck.require(!d.merge_file.empty(), "merge_file", "GPT2BPETokenizer needs merge_file (merges.txt)");
    }
    std::vector<double> parts;
    ck.require(parse_split(d.split, parts), "split",
               "split \"{}\" must be up to three non-negative numbers separated by commas, e.g. 969,30,1", d.split);
    if (!parts.empty()) {
        double sum = 0;
        for (double v : parts) sum += v;
        ck.require(sum > 0 && parts[0] > 0, "split", "split \"{}\" must give the training split a positive share",
                   d.split);
    }
    ck.require(d.eval_interval >= 0, "eval_interval", "eval_interval must not be negative");
    ck.require(d.eval_iters >= 0, "eval_iters", "eval_iters must not be negative");

    // run
    ck.require(l.log_interval >= 1, "log_interval", "log_interval must be at least 1 (got {})", l.log_interval);
    ck.require(c.checkpoint.exit_interval >= 0, "exit_interval", "exit_interval must not be negative");
    ck.require(c.checkpoint.exit_duration_in_mins >= 0, "exit_duration_in_mins", "exit_duration_in_mins must not be negative");
    ck.require(l.tensorboard_log_interval >= 1, "tensorboard_log_interval",
               "tensorboard_log_interval must be at least 1 (got {})", l.tensorboard_log_interval);
    ck.require(c.checkpoint.save_interval >= 0, "save_interval", "save_interval must not be negative");
    ck.require(c.runtime.threads >= 0, "threads", "threads must not be negative");
    validate_cuda_graph(ck, c);
    ck.require(c.telemetry.peak_tflops_per_device >= 0, "peak_tflops_per_device", "peak_tflops_per_device must not be negative");
    // text samples: the ranks of data-parallel replica 0 generate together, each with its part of the model
    ck.require(c.sampling.sample_interval >= 0, "sample_interval", "sample_interval must not be negative");
    ck.require(c.sampling.sample_max_new_tokens >= 1, "sample_max_new_tokens", "sample_max_new_tokens must be at least 1 (got {})",
               c.sampling.sample_max_new_tokens);
    ck.require(c.sampling.sample_temperature >= 0, "sample_temperature", "sample_temperature must not be negative (got {})",
               c.sampling.sample_temperature);
    ck.require(c.sampling.sample_top_k >= 0, "sample_top_k", "sample_top_k must not be negative (got {})", c.sampling.sample_top_k);
    ck.require(c.sampling.sample_top_p > 0 && c.sampling.sample_top_p <= 1, "sample_top_p", "sample_top_p must be in (0, 1] (got {})",
               c.sampling.sample_top_p);
    // telemetry (ipc): plaintext only on loopback; CURVE keys come as a pair (docs/protocol.md)
    const auto loopback = [](const std::string& ep) {
        if (ep.rfind("ipc://", 0) == 0) return true;
        const std::string host = ep.substr(6, ep.rfind(':') > 6 ? ep.rfind(':') - 6 : 0);
        return host.rfind("127.", 0) == 0 || host == "localhost" || host == "[::1]" || host == "::1";
    };
    const std::pair<const char*, const std::string*> endpoints[] = {
        {"telemetry_endpoint", &c.telemetry.telemetry_endpoint},
        {"telemetry_snapshot_endpoint", &c.telemetry.telemetry_snapshot_endpoint},
        {"control_endpoint", &c.telemetry.control_endpoint}};
    for (const auto& [field, ep] : endpoints) {
        if (ep->empty()) continue;
        const bool shaped = (ep->rfind("tcp://", 0) == 0 && ep->rfind(':') > 6) || ep->rfind("ipc://", 0) == 0;
        ck.require(shaped, field, "{} \"{}\" must be tcp://HOST:PORT or ipc://PATH (empty: off)", field, *ep);
        if (shaped)
            ck.require(loopback(*ep) || !c.telemetry.curve_secret_key_file.empty(), field,
                       "{} {} is not a loopback address: plaintext telemetry and control are refused off loopback; "
                       "set curve_secret_key_file and curve_client_keys (mwb-record keygen NAME makes key pairs) or "
                       "bind 127.0.0.1",
                       field, *ep);
    }
    ck.require(c.telemetry.telemetry_endpoint.empty() || !c.telemetry.telemetry_snapshot_endpoint.empty(), "telemetry_snapshot_endpoint",
               "telemetry_snapshot_endpoint must be set when telemetry_endpoint is (late subscribers need it)");
    ck.require(c.telemetry.curve_secret_key_file.empty() == c.telemetry.curve_client_keys.empty(), "curve_client_keys",
               "curve_secret_key_file and curve_client_keys go together: the run's key pair and the clients it admits");
    return ck.issues;
}

void check_config(const Config& config, int world_size) {
    auto issues = validate(config, world_size);
    if (!issues.empty()) throw ConfigError(std::move(issues), "validation");
}

int64_t model_vocab_size(const Config& c) {
    return c.data.tokenizer_type == "NullTokenizer" ? null_tokenizer_vocabulary(c.data, c.model).size
                                                     : c.model.vocab_size;
}

int64_t padded_vocab_size(const Config& c) {
    const int64_t multiple =
        static_cast<int64_t>(c.model.make_vocab_size_divisible_by) * c.parallel.tensor_model_parallel_size;
    return (model_vocab_size(c) + multiple - 1) / multiple * multiple;
}

int data_parallel_size(const Config& c, int world_size) {
    return world_size / (c.parallel.tensor_model_parallel_size * c.parallel.pipeline_model_parallel_size);
}

int64_t num_micro_batches(const Config& c, int world_size) {
    return c.training.global_batch_size /
           (static_cast<int64_t>(c.training.micro_batch_size) * data_parallel_size(c, world_size));
}

int64_t num_micro_batches(const Config& c, int world_size, int64_t consumed_samples) {
    return global_batch_size_at(c, consumed_samples) /
           (static_cast<int64_t>(c.training.micro_batch_size) * data_parallel_size(c, world_size));
}

int64_t max_num_micro_batches(const Config& c, int world_size) {
    int64_t batch = c.training.global_batch_size;
    for (const int64_t b : scheduled_batch_sizes(c)) batch = std::max(batch, b);
    return batch / (static_cast<int64_t>(c.training.micro_batch_size) * data_parallel_size(c, world_size));
}

int64_t global_batch_size_at(const Config& c, int64_t consumed) {
    const TrainingConfig& t = c.training;
    if (!t.step_batch_size_schedule.empty()) {
        std::vector<std::pair<int64_t, int64_t>> steps;
        if (!parse_step_schedule(t.step_batch_size_schedule, c.model.seq_length, steps).empty()) return t.global_batch_size;
        int64_t batch = steps.front().second;
        for (const auto& [threshold, b] : steps)
            if (consumed >= threshold) batch = b;
        return batch;
    }
    BatchRamp r;
    if (t.rampup_batch_size.empty() || !parse_rampup(t, r).empty() || r.start >= t.global_batch_size)
        return t.global_batch_size;
    if (consumed > r.samples) return t.global_batch_size;
    // Megatron-LM's arithmetic: samples per increment as a float, steps truncated.
    const int64_t increments = (t.global_batch_size - r.start) / r.increment;
    const double per_increment = static_cast<double>(r.samples) / static_cast<double>(increments);
    const auto steps = static_cast<int64_t>(static_cast<double>(consumed) / per_increment);
    return std::min<int64_t>(t.global_batch_size, r.start + steps * r.increment);
}

int64_t iterations_for_samples(const Config& c) {
    const TrainingConfig& t = c.training;
    if (t.rampup_batch_size.empty() && t.step_batch_size_schedule.empty())
        return t.global_batch_size > 0 ? t.train_samples / t.global_batch_size : 0;
    int64_t iterations = 0;  // as Megatron-LM's update_train_iters with a variable batch
    for (int64_t consumed = 0; consumed < t.train_samples; ++iterations) {
        const int64_t b = global_batch_size_at(c, consumed);
        if (b < 1) return 0;
        consumed += b;
    }
    return iterations;
}

DType storage_dtype(const TrainingConfig& t) {
    if (t.bf16) return DType::BF16;
    if (t.fp16) return DType::F16;
    return DType::F32;
}

DType gradient_dtype(const TrainingConfig& t) {
    return storage_dtype(t) == DType::F16 && !t.accumulate_allreduce_grads_in_fp32 ? DType::F16 : DType::F32;
}

}  // namespace mwb
