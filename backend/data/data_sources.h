#pragma once
// What mwb-train reads: the train and valid sample streams the configuration asks for, from
// --mock-data, from --data-path (one dataset, or several with weights, blended), or from the bundled
// corpus when data_path is empty. Every dataset is split by --split; samples follow Megatron-LM's
// GPTDataset and BlendedDataset order for training.seed.
#include "backend/config/config.h"
#include "backend/data/sample_source.h"
#include "backend/data/tokenizer.h"

#include <memory>
#include <string>
#include <vector>

namespace mwb::data {

struct DataSources {
    std::unique_ptr<SampleSource> train;
    std::unique_ptr<SampleSource> valid;  ///< null when there is no validation data (or none was asked for)
    std::unique_ptr<SampleSource> test;   ///< null when the split's test share is 0 (or none was asked for)
    std::string description;              ///< one line for the log
};

/// data_path as Megatron reads it (get_blend_from_list): "p" | "p1 p2 ..." | "w1 p1 w2 p2 ...".
/// Entries may also hold several space-separated words. `weights` is empty when none were given.
struct DataBlend {
    std::vector<std::string> prefixes;
    std::vector<double> weights;
};
DataBlend parse_data_path(const std::vector<std::string>& data_path);

/// Sample sources for `train_samples` training, `valid_samples` validation and `test_samples` test
/// samples (Megatron's train_val_test_num_samples; <= 0 asks for one epoch of train, and no
/// validation or test). `tok` must be the
/// tokenizer the data was prepared with (it sizes mock data and the bundled corpus). Throws mwb::Error
/// naming the file or field at fault, e.g. a data_path prefix whose .bin or .idx is missing.
DataSources make_data_sources(const Config& config, const Tokenizer& tok, int64_t train_samples, int64_t valid_samples,
                              int64_t test_samples = 0);

}  // namespace mwb::data
