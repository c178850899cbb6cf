// mwb-gpu-check: the CUDA op checks without Qt, for the bare GPU machine. Prints one line per check
// (name, PASS/FAIL, error, tolerance, worst output) and exits 0 when all pass, 1 when any fails,
// 77 when no GPU is usable. `--list` names the checks; arguments select checks by name. The last
// four (not in the fallback build): "nccl", the NCCL communicator over a group of one, "nccl_timeout",
// its hang handling (a receive nothing matches fails after the timeout, naming who), "model", which
// trains the whole GPT a few iterations on both devices, "model_fp16_gradients", whole fp16 training
// steps with the f16 gradient arena on both devices, "generation", the decoder on both devices, and
// "cuda_graph", whole training steps eagerly and from a CUDA graph (scripts/gpu-check.sh runs it as a
// step of its own).
#include "cuda_op_checks.h"
#if !defined(MWB_GPU_CHECK_NO_MODEL)
#include "cuda_model_check.h"
#endif

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {
std::vector<std::string> all_checks() {
    std::vector<std::string> names = mwb::test::cuda_check_names();
#if !defined(MWB_GPU_CHECK_NO_MODEL)
    names.emplace_back("nccl");
    names.emplace_back("nccl_timeout");
    names.emplace_back("model");
    names.emplace_back("model_fp16_gradients");
    names.emplace_back("generation");
    names.emplace_back("cuda_graph");
#endif
    return names;
}

mwb::test::CudaCheckResult run_check(const std::string& name) {
#if !defined(MWB_GPU_CHECK_NO_MODEL)
    if (name == "model") return mwb::test::check_model_against_cpu();
    if (name == "model_fp16_gradients") return mwb::test::check_model_fp16_gradients();
    if (name == "generation") return mwb::test::check_generation_against_cpu();
    if (name == "cuda_graph") return mwb::test::check_cuda_graph();
    if (name == "nccl") return mwb::test::check_nccl_group_of_one();
    if (name == "nccl_timeout") return mwb::test::check_nccl_timeout();
#endif
    return mwb::test::run_cuda_check(name);
}
}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> names;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--list") == 0) {
            for (const auto& n : all_checks()) std::printf("%s\n", n.c_str());
            return 0;
        }
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
            std::printf("usage: mwb-gpu-check [--list] [CHECK...]\n"
                        "Runs every CUDA op against its CPU twin; exit 0 all pass, 1 a failure, 77 no GPU.\n");
            return 0;
        }
        names.emplace_back(argv[i]);
    }
    if (names.empty()) names = all_checks();
    const std::string reason = mwb::test::cuda_unavailable_reason();
    if (!reason.empty()) {
        std::printf("no CUDA device: %s\n", reason.c_str());
        return 77;
    }
    int failed = 0;
    std::printf("%-28s %-6s %-10s %-10s %s\n", "check", "result", "error", "tolerance", "worst output");
    for (const auto& n : names) {
        const auto r = run_check(n);
        failed += !r.passed;
        std::printf("%-28s %-6s %-10.3g %-10.3g %s\n", r.name.c_str(), r.passed ? "PASS" : "FAIL", r.error, r.tolerance,
                    r.detail.c_str());
        std::fflush(stdout);
    }
    std::printf("%zu checks, %d failed\n", names.size(), failed);
    return failed ? 1 : 0;
}
