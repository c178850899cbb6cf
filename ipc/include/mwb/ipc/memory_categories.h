#pragma once
// The allocator's memory categories: the engine's tracked memory (backend/core/memory.h) counts by
// them, the wire's by_category names them, the app draws them. One list; no dependencies, so the
// engine's core includes it without the rest of the schema.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mwb::ipc {

/// In the order of the wire's by_category and of every per-category array.
enum class MemoryCategory : uint8_t { Weights, Gradients, Optimizer, Activations, Workspace, Data, Count };
inline constexpr std::size_t kMemoryCategoryCount = static_cast<std::size_t>(MemoryCategory::Count);
inline constexpr std::string_view kMemoryCategories[kMemoryCategoryCount] = {"weights",     "gradients", "optimizer",
                                                                             "activations", "workspace", "data"};

/// The wire name of `c` ("weights").
constexpr std::string_view memory_category_name(MemoryCategory c) {
    return kMemoryCategories[static_cast<std::size_t>(c)];
}

}  // namespace mwb::ipc
