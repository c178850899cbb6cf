#pragma once
// `mwb-gpu-bench attention ...`: the attention micro-benchmark (attention_bench.cpp).
namespace mwb::bench {
/// argv[0] is "attention"; returns the exit status (0, 2 bad arguments, 77 no GPU, 1 failure).
int run_attention_bench(int argc, char** argv);
}  // namespace mwb::bench
