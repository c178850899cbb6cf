#include "backend/data/gpt_dataset.h"

#include "backend/data/gpt_indices.h"
#include "backend/data/npy.h"
#include "mwb/kernels/error.h"

#include <xxhash.h>
#include <nlohmann/json.hpp>

namespace mwb::data {

GPTDataset::GPTDataset(std::shared_ptr<const IndexedDataset> data, SequenceRange range, GPTDatasetOptions options)
    : data_(std::move(data)), range_(range), options_(std::move(options)) {
    MWB_CHECK(data_, "GPTDataset needs an indexed dataset");
    MWB_CHECK(options_.seq_length >= 1, "GPTDataset: seq_length must be at least 1 (got {})", options_.seq_length);
    MWB_CHECK(range_.begin >= 0 && range_.begin <= range_.end && range_.end <= data_->sequence_count() &&
                  range_.end <= int64_t{1} << 31,
              "GPTDataset: sequences [{}, {}) are outside the {} sequences of '{}'", range_.begin, range_.end,
              data_->sequence_count(), data_->prefix());
    for (int64_t i = range_.begin; i < range_.end; ++i) tokens_per_epoch_ += data_->sequence_length(i);
    MWB_CHECK(tokens_per_epoch_ > options_.seq_length,
              "the {} split of '{}' (sequences [{}, {})) has {} tokens, not enough for one sample of seq_length + 1 = "
              "{}: use more data, a larger share in --split, or a shorter --seq-length",
              split_name(options_.split), data_->prefix(), range_.begin, range_.end, tokens_per_epoch_,
              options_.seq_length + 1);

    const std::string description = description_json();
    const XXH128_hash_t h = XXH3_128bits(description.data(), description.size());
    const fs::path dir = options_.cache_dir.empty() ? fs::path(data_->prefix()) / "cache" / "GPTDataset_indices"
                                                    : fs::path(options_.cache_dir);
    const std::string base =
        (dir / fmt::format("{:016x}{:016x}-GPTDataset-{}", h.high64, h.low64, split_name(options_.split))).string();
    if (!try_load(base, description)) {
        build();
        save(base, description);
    }
}

std::string GPTDataset::description_json() const {
    nlohmann::ordered_json d;
    d["class"] = "GPTDataset";
    d["format"] = "mwb-gpt-indices-1";
    d["dataset_path"] = fs::absolute(data_->prefix()).lexically_normal().string();
    d["dataset_hash"] = fmt::format("{:016x}", data_->content_hash());
    d["index_split"] = std::string(split_name(options_.split));
    d["sequences"] = {range_.begin, range_.end};
    d["num_samples"] = options_.num_samples;
    d["sequence_length"] = options_.seq_length;
    d["random_seed"] = options_.seed;
    d["add_extra_token_to_sequence"] = true;
    return d.dump(2);
}

void GPTDataset::build() {
    const EpochPlan plan = gpt_epoch_plan(tokens_per_epoch_, options_.seq_length, options_.num_samples);
    epochs_ = plan.num_epochs;
    NumpyRandomState rng(options_.seed);
    std::vector<int32_t> ids(static_cast<std::size_t>(range_.size()));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(range_.begin + static_cast<int64_t>(i));
    document_index_ = build_document_index(ids, epochs_, rng, plan.separate_final_epoch);
    const IndexedDataset& ds = *data_;
    sample_index_ = build_sample_index([&ds](int32_t id) { return static_cast<int64_t>(ds.sequence_length(id)); },
                                       document_index_, options_.seq_length, epochs_, tokens_per_epoch_);
    const int64_t samples = static_cast<int64_t>(sample_index_.size() / 2) - 1;
    shuffle_index_ =
        build_shuffle_index(plan.separate_final_epoch ? plan.samples_before_final_epoch : samples, samples, rng);
}

bool GPTDataset::try_load(const std::string& base, const std::string& description) {
    std::error_code ec;
    for (const char* part : {"-description.txt", "-document_index.npy", "-sample_index.npy", "-shuffle_index.npy"})
        if (!fs::is_regular_file(base + part, ec)) return false;
    try {
        if (read_file(base + "-description.txt") != description) {
            cache_note_ = "cached indices described other parameters (hash collision?): rebuilt";
            return false;
        }
        epochs_ = gpt_num_epochs(tokens_per_epoch_, options_.seq_length, options_.num_samples);
        const int64_t samples = (epochs_ * tokens_per_epoch_ - 1) / options_.seq_length;
        const NpyInts doc = read_npy_ints(base + "-document_index.npy");
        const NpyInts smp = read_npy_ints(base + "-sample_index.npy");
        const NpyInts shf = read_npy_ints(base + "-shuffle_index.npy");
        const auto bad = [&](const std::string& what) {
            cache_note_ = fmt::format("cached indices at {}-*.npy were damaged ({}): rebuilt", base, what);
            return false;
        };
        if (doc.shape != std::vector<int64_t>{epochs_ * range_.size()}) return bad("document index shape");
        if (smp.shape != std::vector<int64_t>{samples + 1, 2}) return bad("sample index shape");
        if (shf.shape != std::vector<int64_t>{samples}) return bad("shuffle index shape");
        for (const int64_t id : doc.values)
            if (id < range_.begin || id >= range_.end) return bad("document index entry out of range");
        for (int64_t s = 0; s <= samples; ++s) {
            const int64_t pos = smp.values[2 * s], off = smp.values[2 * s + 1];
            if (pos < 0 || pos >= static_cast<int64_t>(doc.values.size())) return bad("sample index position");
            if (off < 0 || (off >= data_->sequence_length(doc.values[pos]) && off > 0))
                return bad("sample index offset");
        }
        std::vector<bool> seen(static_cast<std::size_t>(samples), false);
        for (const int64_t v : shf.values) {
            if (v < 0 || v >= samples || seen[v]) return bad("shuffle index is not a permutation");
            seen[v] = true;
        }
        document_index_.assign(doc.values.begin(), doc.values.end());
        sample_index_ = smp.values;
        shuffle_index_ = shf.values;
        from_cache_ = true;
        cache_prefix_ = base;
        return true;
    } catch (const Error& e) {
        cache_note_ = fmt::format("cached indices unreadable ({}): rebuilt", e.what());
        return false;
    }
}

void GPTDataset::save(const std::string& base, const std::string& description) {
    try {
        const int64_t samples = size();
        write_npy<int32_t>(base + "-document_index.npy", document_index_,
                           std::vector<int64_t>{static_cast<int64_t>(document_index_.size())});
        write_npy<int64_t>(base + "-sample_index.npy", sample_index_, std::vector<int64_t>{samples + 1, 2});
        const std::vector<int64_t> shape{samples};
        if (samples < int64_t{0xffffffff} - 1) {  // Megatron's dtype choice for the shuffle index
            const std::vector<uint32_t> narrow(shuffle_index_.begin(), shuffle_index_.end());
            write_npy<uint32_t>(base + "-shuffle_index.npy", narrow, shape);
        } else {
            write_npy<int64_t>(base + "-shuffle_index.npy", shuffle_index_, shape);
        }
        // Written last: its presence means the three arrays are complete.
        write_file_atomic(base + "-description.txt", description);
        cache_prefix_ = base;
    } catch (const Error& e) {
        // A read-only data directory is common on clusters: train from the in-memory indices.
        cache_note_ = fmt::format("indices not cached ({}); set data_cache_path to a writable directory", e.what());
    }
}

void GPTDataset::read(int64_t index, std::span<int32_t> out) const {
    MWB_CHECK(static_cast<int64_t>(out.size()) == sample_tokens(), "GPTDataset: sample buffer of {} tokens, need {}",
              out.size(), sample_tokens());
    const int64_t n = size();
    const int64_t sample = shuffle_index_[static_cast<std::size_t>(((index % n) + n) % n)];
    const int64_t first = sample_index_[2 * sample], first_offset = sample_index_[2 * sample + 1];
    const int64_t last = sample_index_[2 * sample + 2], last_offset = sample_index_[2 * sample + 3];
    std::size_t done = 0;
    for (int64_t pos = first; pos <= last; ++pos) {
        const int32_t id = document_index_[static_cast<std::size_t>(pos)];
        const int64_t begin = pos == first ? first_offset : 0;
        const int64_t end = pos == last ? last_offset + 1 : data_->sequence_length(id);  // + the extra token
        MWB_CHECK(done + static_cast<std::size_t>(end - begin) <= out.size(),
                  "GPTDataset: sample {} spans more than {} tokens (corrupt index)", sample, out.size());
        data_->read(id, begin, out.subspan(done, static_cast<std::size_t>(end - begin)));
        done += static_cast<std::size_t>(end - begin);
    }
    MWB_CHECK(done == out.size(), "GPTDataset: sample {} has {} tokens, expected {} (corrupt index)", sample, done,
              out.size());
}

std::string GPTDataset::describe() const {
    std::string s = fmt::format(
        "{} split of {}: sequences [{}, {}), {} tokens/epoch, {} epoch(s), {} samples of {} "
        "tokens, seed {}, indices {}",
        split_name(options_.split), data_->prefix(), range_.begin, range_.end, tokens_per_epoch_, epochs_, size(),
        sample_tokens(), options_.seed,
        from_cache_ ? "from cache" : (cache_prefix_.empty() ? "in memory" : "built and cached"));
    if (!cache_note_.empty()) s += "; " + cache_note_;
    return s;
}

}  // namespace mwb::data
