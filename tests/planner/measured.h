#pragma once
// What the two measured suites (test_measured: one rank, test_measured_parallel: mpirun) share: the
// flags of the Llama-family model they run, and applying mwb-train flags onto a Config for the plan.
#include "backend/config/config_io.h"

#include <QStringList>
#include <QtTest>

namespace mwb::test {

/// The Llama switches over a suite's base flags: 4 heads in 2 groups (head dim 8), SwiGLU of 2 × 64,
/// RoPE, RMSNorm, no biases, untied output layer.
inline QStringList llama_flags() {
    return {"--group-query-attention",
            "--num-query-groups",
            "2",
            "--swiglu",
            "--ffn-hidden-size",
            "64",
            "--position-embedding-type",
            "rope",
            "--normalization",
            "RMSNorm",
            "--add-bias-linear",
            "false",
            "--untie-embeddings-and-output-weights"};
}

/// Applies `--flag value` pairs (bools as a lone flag) the way mwb-train does, onto `c`.
inline void apply_flags(Config& c, const QStringList& flags) {
    for (int i = 0; i < flags.size(); ++i) {
        const std::string flag = flags[i].toStdString();
        const Field* f = find_config_field(flag.substr(2));
        QVERIFY2(f, flag.c_str());
        const bool has_value = i + 1 < flags.size() && !flags[i + 1].startsWith("--");
        set_field(c, *f, has_value ? flags[++i].toStdString() : "");
    }
}

}  // namespace mwb::test
