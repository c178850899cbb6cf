#pragma once
// Small file-system helpers with the project's guarantees: writes go to a temporary file in the same
// directory and are renamed into place (readers never see half a file), errors name the path.
#include <filesystem>
#include <string>
#include <string_view>

namespace mwb {

namespace fs = std::filesystem;

/// Writes `content` to `path` atomically (temp file + fsync + rename).
void write_file_atomic(const fs::path& path, std::string_view content);
/// Reads a whole file; throws mwb::Error naming the path when it cannot, or when it exceeds max_bytes.
std::string read_file(const fs::path& path, std::size_t max_bytes = std::size_t{1} << 30);
/// fsyncs a directory so a rename inside it is durable.
void sync_directory(const fs::path& dir);

/// $XDG_DATA_HOME/mwb (default ~/.local/share/mwb): runs, prepared data, the history store.
fs::path user_data_dir();

}  // namespace mwb
