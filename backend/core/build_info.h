#pragma once
// Facts about the build, recorded in every run.json.
#include <nlohmann/json.hpp>

namespace mwb {

/// {"version", "git_commit", "build_type", "compiler", "cuda", "blas"}.
nlohmann::json build_info();

}  // namespace mwb
