#include "dynamic_library.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

namespace mwb::cuda {

namespace {

/// The folder libcudart was loaded from ("" when unknown).
std::string cudart_folder() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&cudaRuntimeGetVersion), &info) == 0 || !info.dli_fname) return {};
    return std::filesystem::path(info.dli_fname).parent_path().string();
}

}  // namespace

DynamicLibrary open_cuda_library(const std::string& soname, const char* override_env) {
    DynamicLibrary lib;
    const char* path = override_env ? std::getenv(override_env) : nullptr;
    lib.name = path && *path ? path : soname;
    lib.handle = dlopen(lib.name.c_str(), RTLD_NOW | RTLD_LOCAL);
    std::string first_error;
    if (!lib.handle) {
        const char* e = dlerror();
        first_error = e ? e : lib.name;
    }
    if (!lib.handle && lib.name == soname) {
        if (const std::string folder = cudart_folder(); !folder.empty()) {
            const std::string beside = folder + "/" + soname;
            if ((lib.handle = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL))) lib.name = beside;
        }
    }
    if (!lib.handle)
        lib.error = fmt::format("{} not found ({}{})", soname, first_error,
                                override_env ? fmt::format("; set {} to its path", override_env) : std::string());
    return lib;
}

}  // namespace mwb::cuda
