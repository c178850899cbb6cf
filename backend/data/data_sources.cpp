#include "backend/data/data_sources.h"

#include "backend/data/blended_source.h"
#include "backend/data/bundled_corpus.h"
#include "backend/data/gpt_dataset.h"
#include "backend/data/indexed_dataset.h"
#include "backend/data/mock_data.h"
#include "backend/data/split.h"
#include "mwb/kernels/error.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace mwb::data {

namespace {

using Datasets = std::vector<std::shared_ptr<const IndexedDataset>>;

std::shared_ptr<const IndexedDataset> open_dataset(const std::string& prefix, const Tokenizer& tok) {
    for (const fs::path& p : {idx_path(prefix), bin_path(prefix)}) {
        std::error_code ec;
        MWB_CHECK(fs::is_regular_file(p, ec),
                  "data_path: '{}' does not exist (data_path names the prefix of a .bin/.idx pair made by `mwb-data "
                  "preprocess` or Megatron-LM's preprocess_data.py)",
                  p.string());
    }
    auto ds = std::make_shared<const IndexedDataset>(prefix);
    // A dataset prepared with another tokenizer shows itself in its first ids; check a bounded prefix.
    std::vector<int32_t> buf;
    int64_t checked = 0;
    for (int64_t s = 0; s < ds->sequence_count() && checked < (int64_t{1} << 20); ++s) {
        buf.resize(static_cast<std::size_t>(ds->sequence_length(s)));
        ds->read(s, 0, buf);
        for (const int32_t id : buf)
            MWB_CHECK(id >= 0 && id < tok.vocab_size(),
                      "'{}' holds token id {}, outside the {} ids of {}: the data was prepared with another tokenizer "
                      "(set tokenizer_type, vocab_file, merge_file to match)",
                      bin_path(prefix).string(), id, tok.vocab_size(), tok.name());
        checked += static_cast<int64_t>(buf.size());
    }
    return ds;
}

std::vector<double> normalized(std::vector<double> w) {
    double sum = 0;
    for (const double x : w) sum += x;
    MWB_CHECK(sum > 0, "data_path: the dataset weights sum to {}, need a positive sum", sum);
    for (double& x : w) x /= sum;
    return w;
}

struct Builder {
    const Config& cfg;
    const Datasets& datasets;
    const std::vector<double>& weights;  // empty: one unweighted dataset

    GPTDatasetOptions options(Split split, int64_t samples) const {
        const int64_t seed = cfg.training.seed;
        MWB_CHECK(seed >= 0 && seed <= 0xffffffffll,
                  "seed {} must be in [0, 2^32) (numpy's RandomState seeds the data)", seed);
        return {cfg.model.seq_length, samples, static_cast<uint32_t>(seed), split, cfg.data.data_cache_path};
    }
    SequenceRange range(std::size_t d, Split split) const {
        return split_ranges(cfg.data.split, datasets[d]->sequence_count())[static_cast<std::size_t>(split)];
    }

    /// The split's sample source, or null when the split is empty everywhere.
    std::unique_ptr<SampleSource> make(Split split, int64_t samples) const {
        if (parse_split(cfg.data.split)[static_cast<std::size_t>(split)] == 0) return nullptr;
        if (datasets.size() == 1 && weights.empty()) {
            const SequenceRange r = range(0, split);
            if (r.size() == 0) return nullptr;
            return std::make_unique<GPTDataset>(datasets[0], r, options(split, samples));
        }
        // Several datasets: Megatron's BlendedDataset over one GPTDataset per dataset, each asked for its
        // share plus a 0.5% margin (ceil(ceil(n * w) * 1.005)), so the blend never runs a source dry.
        std::vector<double> w = weights;
        if (w.empty()) {
            // Without weights every dataset counts by its tokens in this split.
            for (std::size_t d = 0; d < datasets.size(); ++d) {
                const SequenceRange r = range(d, split);
                double tokens = 0;
                for (int64_t s = r.begin; s < r.end; ++s) tokens += datasets[d]->sequence_length(s);
                w.push_back(tokens);
            }
            double sum = 0;
            for (const double x : w) sum += x;
            if (sum == 0) return nullptr;
        }
        w = normalized(w);
        std::vector<std::unique_ptr<SampleSource>> sources;
        int64_t total = 0;
        for (std::size_t d = 0; d < datasets.size(); ++d) {
            const SequenceRange r = range(d, split);
            MWB_CHECK(r.size() > 0, "data_path: '{}' has no sequences in its {} split (split {}, {} sequences)",
                      datasets[d]->prefix(), split_name(split), cfg.data.split, datasets[d]->sequence_count());
            const int64_t want =
                samples > 0 ? static_cast<int64_t>(std::ceil(std::ceil(static_cast<double>(samples) * w[d]) * 1.005))
                            : 0;
            sources.push_back(std::make_unique<GPTDataset>(datasets[d], r, options(split, want)));
            total += sources.back()->size();
        }
        return std::make_unique<BlendedSampleSource>(std::move(sources), w, samples > 0 ? samples : total);
    }
};

}  // namespace

DataBlend parse_data_path(const std::vector<std::string>& data_path) {
    std::vector<std::string> words;
    for (const std::string& entry : data_path) {
        std::size_t i = 0;
        while (i < entry.size()) {
            while (i < entry.size() && std::isspace(static_cast<unsigned char>(entry[i]))) ++i;
            std::size_t j = i;
            while (j < entry.size() && !std::isspace(static_cast<unsigned char>(entry[j]))) ++j;
            if (j > i) words.push_back(entry.substr(i, j - i));
            i = j;
        }
    }
    DataBlend blend;
    if (words.size() % 2 == 1) {
        blend.prefixes = words;
        return blend;
    }
    std::size_t numbers = 0;
    std::vector<double> weights;
    for (std::size_t i = 0; i < words.size(); i += 2) {
        char* end = nullptr;
        const double w = std::strtod(words[i].c_str(), &end);
        if (end == words[i].c_str() + words[i].size()) ++numbers, weights.push_back(w);
    }
    if (numbers == 0) {
        blend.prefixes = words;
        return blend;
    }
    MWB_CHECK(numbers == words.size() / 2,
              "data_path: expected either prefixes only or weight/prefix pairs (\"0.3 a 0.7 b\"), got '{}'",
              fmt::join(words, " "));
    for (std::size_t i = 1; i < words.size(); i += 2) blend.prefixes.push_back(words[i]);
    for (const double w : weights) {
        MWB_CHECK(std::isfinite(w), "data_path: weight {} is not a finite number", w);
        MWB_CHECK(w >= 0, "data_path: weight {} is negative", w);
    }
    blend.weights = weights;
    return blend;
}

DataSources make_data_sources(const Config& cfg, const Tokenizer& tok, int64_t train_samples, int64_t valid_samples,
                              int64_t test_samples) {
    const DataConfig& d = cfg.data;
    const int64_t seq = cfg.model.seq_length;
    MWB_CHECK(seq >= 1, "seq_length must be at least 1 (got {})", seq);
    DataSources out;
    if (d.mock_data) {
        const auto seed = static_cast<uint64_t>(cfg.training.seed);
        out.train = std::make_unique<MockSampleSource>(seq, tok.vocab_size(), seed, 0);
        if (valid_samples > 0) out.valid = std::make_unique<MockSampleSource>(seq, tok.vocab_size(), seed, 1);
        if (test_samples > 0 && parse_split(d.split)[2] > 0)
            out.test = std::make_unique<MockSampleSource>(seq, tok.vocab_size(), seed, 2);
        out.description = out.train->describe();
        return out;
    }

    DataBlend blend;
    std::string what;
    if (d.data_path.empty()) {
        blend.prefixes = {ensure_bundled_corpus(tok)};
        what = "bundled corpus (King James Bible, one document per chapter)";
    } else {
        blend = parse_data_path(d.data_path);
        MWB_CHECK(!blend.prefixes.empty(), "data_path is empty");
        what = fmt::format("data_path {}", fmt::join(d.data_path, " "));
    }
    Datasets datasets;
    for (const std::string& prefix : blend.prefixes) datasets.push_back(open_dataset(prefix, tok));

    const Builder builder{cfg, datasets, blend.weights};
    out.train = builder.make(Split::Train, train_samples);
    MWB_CHECK(out.train, "split '{}' leaves no training data", d.split);
    if (valid_samples > 0) out.valid = builder.make(Split::Valid, valid_samples);
    if (test_samples > 0) out.test = builder.make(Split::Test, test_samples);
    out.description = fmt::format("{}, split {} | train: {} | valid: {} | test: {}", what, d.split,
                                  out.train->describe(), out.valid ? out.valid->describe() : "none",
                                  out.test ? out.test->describe() : "none");
    return out;
}

}  // namespace mwb::data
