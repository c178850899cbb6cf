#include "backend/core/files.h"

#include "mwb/kernels/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

namespace mwb {

namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

void write_file_atomic(const fs::path& path, std::string_view content) {
    const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
    std::error_code ec;
    fs::create_directories(dir, ec);
    MWB_CHECK(!ec, "cannot create directory '{}': {}", dir.string(), ec.message());
    const fs::path tmp = dir / fmt::format(".{}.tmp-{:x}", path.filename().string(), std::random_device{}());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    MWB_CHECK(fd >= 0, "cannot write '{}': {}", tmp.string(), errno_text());
    std::size_t done = 0;
    while (done < content.size()) {
        const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const std::string why = errno_text();
            ::close(fd);
            fs::remove(tmp, ec);
            MWB_FAIL("cannot write '{}': {}", tmp.string(), why);
        }
        done += static_cast<std::size_t>(n);
    }
    const bool synced = ::fsync(fd) == 0;
    ::close(fd);
    if (!synced) {
        fs::remove(tmp, ec);
        MWB_FAIL("cannot sync '{}': {}", tmp.string(), errno_text());
    }
    fs::rename(tmp, path, ec);
    if (ec) {
        fs::remove(tmp);
        MWB_FAIL("cannot rename '{}' to '{}': {}", tmp.string(), path.string(), ec.message());
    }
    sync_directory(dir);
}

std::string read_file(const fs::path& path, std::size_t max_bytes) {
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    MWB_CHECK(!ec, "cannot read '{}': {}", path.string(), ec.message());
    MWB_CHECK(size <= max_bytes, "'{}' is {} bytes, more than the {} expected", path.string(), size, max_bytes);
    std::ifstream in(path, std::ios::binary);
    MWB_CHECK(in.good(), "cannot open '{}'", path.string());
    std::string data(static_cast<std::size_t>(size), '\0');
    in.read(data.data(), static_cast<std::streamsize>(size));
    MWB_CHECK(in.gcount() == static_cast<std::streamsize>(size), "short read of '{}'", path.string());
    return data;
}

void sync_directory(const fs::path& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

fs::path user_data_dir() {
    if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return fs::path(xdg) / "mwb";
    if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".local" / "share" / "mwb";
    return fs::current_path() / ".mwb";
}

}  // namespace mwb
