#pragma once
// Secrets on disk: files created with their final mode (0600 by default, never briefly readable by
// others), written atomically (temp file + fsync + rename), and the per-run control token that
// authenticates plaintext control requests on loopback (docs/protocol.md, "Security").
#include <filesystem>
#include <string>
#include <string_view>

namespace mwb::ipc {

/// Writes `content` to `path` atomically, creating it with `mode`; throws Error naming the path.
void write_private_file(const std::filesystem::path& path, std::string_view content, unsigned mode = 0600);

/// 32 random bytes from the kernel (getrandom), as 64 hex characters.
std::string random_token();
/// Makes a fresh token and writes it to `file` (mode 0600); returns it.
std::string create_token_file(const std::filesystem::path& file);
/// Reads a token file (surrounding whitespace removed); throws Error naming the file.
std::string read_token_file(const std::filesystem::path& file);
/// Compares in time independent of where the strings differ.
bool tokens_equal(std::string_view a, std::string_view b);

}  // namespace mwb::ipc
