#include "mwb/ipc/private_file.h"

#include "mwb/ipc/error.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace mwb::ipc {

namespace fs = std::filesystem;

void write_private_file(const fs::path& path, std::string_view content, unsigned mode) {
    const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
    const fs::path tmp = dir / ("." + path.filename().string() + ".tmp-" + random_token().substr(0, 8));
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
    if (fd < 0) throw Error("cannot write '" + path.string() + "': " + std::strerror(errno));
    ::fchmod(fd, static_cast<mode_t>(mode));  // the umask may have narrowed a public file's mode
    std::size_t done = 0;
    bool ok = true;
    while (ok && done < content.size()) {
        const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
        if (n < 0 && errno == EINTR) continue;
        ok = n > 0;
        if (ok) done += static_cast<std::size_t>(n);
    }
    ok = ok && ::fsync(fd) == 0;
    const std::string why = ok ? "" : std::strerror(errno);
    ::close(fd);
    if (ok && ::rename(tmp.c_str(), path.c_str()) == 0) return;
    const std::string reason = ok ? std::strerror(errno) : why;
    ::unlink(tmp.c_str());
    throw Error("cannot write '" + path.string() + "': " + reason);
}

std::string random_token() {
    unsigned char bytes[32];
    std::size_t got = 0;
    while (got < sizeof bytes) {
        const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw Error(std::string("getrandom failed: ") + std::strerror(errno));
        got += static_cast<std::size_t>(n);
    }
    static const char hex[] = "0123456789abcdef";
    std::string s;
    for (unsigned char b : bytes) {
        s += hex[b >> 4];
        s += hex[b & 15];
    }
    return s;
}

std::string create_token_file(const fs::path& file) {
    std::string token = random_token();
    write_private_file(file, token + "\n");
    return token;
}

std::string read_token_file(const fs::path& file) {
    std::ifstream in(file);
    if (!in) throw Error("control token file '" + file.string() + "': cannot read it (" + std::strerror(errno) + ")");
    std::string token;
    std::getline(in, token);
    while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
    if (token.empty()) throw Error("control token file '" + file.string() + "' is empty");
    return token;
}

bool tokens_equal(std::string_view a, std::string_view b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    const std::size_t n = std::max(a.size(), b.size());
    for (std::size_t i = 0; i < n; ++i) {
        const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
        const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
        diff |= static_cast<unsigned char>(x ^ y);
    }
    return diff == 0;
}

}  // namespace mwb::ipc
