#include "backend/data/bundled_corpus.h"

#include "backend/data/indexed_dataset.h"
#include "backend/data/preprocess.h"
#include "mwb/kernels/error.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <thread>

namespace mwb::data {

namespace {

constexpr int kChapters = 1189;

// The `bible` program prints one chapter after another: a blank line, "Book N", a blank line, then
// "  V text" per verse (-l with a huge width keeps every verse on one line).
std::string run_bible() {
    const char* candidates[] = {"/usr/bin/bible", "/usr/games/bible", "bible"};
    for (const char* exe : candidates) {
        if (exe[0] == '/' && ::access(exe, X_OK) != 0) continue;
        const std::string cmd = fmt::format("{} -l 1000000 Gen1:1-Rev22:21 2>/dev/null", exe);
        std::FILE* pipe = ::popen(cmd.c_str(), "r");
        if (!pipe) continue;
        std::string out;
        char buf[1 << 16];
        std::size_t n;
        while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
        const int status = ::pclose(pipe);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && out.size() > 1000000) return out;
    }
    MWB_FAIL(
        "the bundled corpus needs the King James Bible from Debian's bible-kjv and bible-kjv-text packages "
        "(`bible` was not found or printed nothing): run scripts/setup.sh or apt-get install bible-kjv "
        "bible-kjv-text; or train on your own data (--data-path) or --mock-data");
}

std::string sanitized(std::string s) {
    for (char& c : s)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
    return s;
}

}  // namespace

fs::path bundled_corpus_dir() {
    return user_data_dir() / "data" / "kjv";
}

std::vector<std::string> read_kjv_chapters() {
    const std::string text = run_bible();
    std::vector<std::string> chapters;
    chapters.reserve(kChapters);
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t eol = text.find('\n', pos);
        if (eol == std::string::npos) eol = text.size();
        const std::string_view line(text.data() + pos, eol - pos);
        if (!line.empty() && line[0] != ' ') chapters.emplace_back();  // "Book N" opens a chapter
        if (!chapters.empty()) {
            chapters.back().append(line);
            chapters.back().push_back('\n');
        }
        pos = eol + 1;
    }
    for (std::string& c : chapters)  // drop the blank line that separates it from the next chapter
        while (c.size() >= 2 && c[c.size() - 1] == '\n' && c[c.size() - 2] == '\n') c.pop_back();
    MWB_CHECK(chapters.size() == kChapters, "`bible` printed {} chapters, expected the {} of the King James Bible",
              chapters.size(), kChapters);
    return chapters;
}

std::string ensure_bundled_corpus(const Tokenizer& tok, bool quiet) {
    MWB_CHECK(tok.name() != "NullTokenizer",
              "the bundled corpus is text; NullTokenizer reads pre-tokenised ids: choose ByteTokenizer or "
              "GPT2BPETokenizer, or set --data-path");
    const fs::path dir = bundled_corpus_dir();
    const std::string prefix = (dir / fmt::format("kjv_{}_text_document", sanitized(tok.fingerprint()))).string();
    if (indexed_dataset_exists(prefix)) {
        try {
            const IndexedDataset ds(prefix);
            if (ds.document_count() == kChapters) return prefix;
        } catch (const Error&) {
            // Damaged (e.g. a disk filled up): prepare it again below.
        }
    }
    const auto started = std::chrono::steady_clock::now();
    if (!quiet)
        fmt::print(stderr, "preparing the bundled corpus (King James Bible, {} chapters) with {} in {} ...\n",
                   kChapters, tok.name(), dir.string());
    const std::vector<std::string> chapters = read_kjv_chapters();
    std::vector<EncodedDocument> encoded(chapters.size());
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    parallel_for(static_cast<int64_t>(chapters.size()), threads,
                 [&](int64_t i) { encode_text(tok, chapters[i], /*append_eod=*/true, encoded[i]); });
    IndexedDatasetBuilder builder(prefix, optimal_dtype(tok.vocab_size()));
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < chapters.size(); ++i) {
        builder.add_document(encoded[i].tokens, encoded[i].lengths);
        bytes += chapters[i].size();
    }
    builder.finalize();
    if (!quiet)
        fmt::print(stderr, "bundled corpus ready: {:.2f} MB of text, {} tokens ({:.1f} s): {}\n",
                   static_cast<double>(bytes) / 1e6, builder.token_count(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), prefix);
    return prefix;
}

}  // namespace mwb::data
