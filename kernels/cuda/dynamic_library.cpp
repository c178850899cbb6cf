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
    // Every place tried, with dlerror's reason, for the message when none has it.
    std::string tried;
    const auto attempt = [&](const std::string& name, const std::string& where) {
        void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char* e = dlerror();
            tried += fmt::format("{}{}{}: {}", tried.empty() ? "" : "; ", name, where, e ? e : "not loadable");
        }
        return h;
    };
    if (lib.name != soname) {
        lib.handle = attempt(lib.name, fmt::format(" (from {})", override_env));
    } else {
        const char* search = std::getenv("LD_LIBRARY_PATH");
        lib.handle = attempt(soname, fmt::format(" on the loader's path (LD_LIBRARY_PATH={}, RUNPATH, ld.so.cache)",
                                                 search && *search ? search : "unset"));
        if (!lib.handle) {
            if (const std::string folder = cudart_folder(); !folder.empty()) {
                const std::string beside = folder + "/" + soname;
                if ((lib.handle = attempt(beside, " (beside libcudart)"))) lib.name = beside;
            }
        }
    }
    if (!lib.handle)
        lib.error = fmt::format("{} not found ({}{})", soname, tried,
                                override_env ? fmt::format("; set {} to its path", override_env) : std::string());
    return lib;
}

}  // namespace mwb::cuda
