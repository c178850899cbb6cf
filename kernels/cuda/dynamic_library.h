#pragma once
// A CUDA library loaded when first used (dlopen), its entry points resolved by name, for the libraries
// a CPU run must not pay for: cuBLASLt's static initialisation alone costs every process that links it
// ~0.45 s of CPU at start (measured: an empty program linked with -lcublasLt, docs/performance.md, "CI
// time"), and cuDNN may be absent. The declarations come from the libraries' headers; nothing is linked.
#include <dlfcn.h>

#include <string>

namespace mwb::cuda {

struct DynamicLibrary {
    void* handle = nullptr;
    std::string name;   // the soname or path that was opened (or tried)
    std::string error;  // empty while the library and every symbol asked for so far resolved

    /// Resolves `symbol` into `fn` (its type from the header's declaration: decltype(&symbol)); on
    /// failure `fn` stays null and the first failure is kept in `error`.
    template <class Fn>
    void resolve(Fn& fn, const char* symbol) {
        fn = handle ? reinterpret_cast<Fn>(dlsym(handle, symbol)) : nullptr;
        if (!fn && error.empty()) error = name + " lacks " + symbol;
    }
};

/// Opens `soname` (RTLD_NOW | RTLD_LOCAL; the handle stays open for the process) on the loader's search
/// path (LD_LIBRARY_PATH, the program's RUNPATH, ld.so.cache), then, when not found there, in the folder
/// of the CUDA runtime this process uses (libcudart's), where the toolkit keeps its libraries.
/// `override_env`: an environment variable that, when set, names the library's path instead.
DynamicLibrary open_cuda_library(const std::string& soname, const char* override_env);

}  // namespace mwb::cuda
