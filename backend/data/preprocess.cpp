#include "backend/data/preprocess.h"

#include "backend/data/indexed_dataset.h"
#include "mwb/kernels/error.h"

#include <unistd.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>

namespace mwb::data {

void encode_text(const Tokenizer& tok, std::string_view text, bool append_eod, EncodedDocument& out) {
    out.tokens.clear();
    out.lengths.clear();
    tok.encode(text, out.tokens);
    if (out.tokens.empty()) return;
    if (append_eod) out.tokens.push_back(tok.eod());
    out.lengths.push_back(static_cast<int32_t>(out.tokens.size()));
}

void parallel_for(int64_t n, int threads, const std::function<void(int64_t)>& work) {
    std::atomic<int64_t> next{0};
    std::atomic<bool> failed{false};
    std::exception_ptr first;
    std::mutex mutex;
    const auto run = [&] {
        while (!failed.load(std::memory_order_relaxed)) {
            const int64_t i = next.fetch_add(1);
            if (i >= n) break;
            try {
                work(i);
            } catch (...) {
                const std::lock_guard lock(mutex);
                if (!first) first = std::current_exception();
                failed = true;
            }
        }
    };
    const int64_t count = std::clamp<int64_t>(threads, 1, std::max<int64_t>(n, 1));
    std::vector<std::thread> pool;
    pool.reserve(static_cast<std::size_t>(count - 1));
    for (int64_t t = 1; t < count; ++t) pool.emplace_back(run);
    run();
    for (auto& t : pool) t.join();
    if (first) std::rethrow_exception(first);
}

namespace {

bool is_json_lines(const std::string& path) {
    const std::string ext = fs::path(path).extension().string();
    return ext == ".json" || ext == ".jsonl";
}

struct Record {
    std::string text;
    std::size_t file = 0;
    int64_t line = 0;  // 1-based line of a JSON record; 0 for text
};

// Yields the inputs' records in order: JSON lines one by one, plain text files split by TextUnit.
class RecordReader {
public:
    explicit RecordReader(const PreprocessOptions& o) : o_(o) {}

    bool next(Record& r) {
        while (true) {
            if (!pending_.empty()) {
                r = std::move(pending_.front());
                pending_.pop_front();
                return true;
            }
            if (json_.is_open()) {
                std::string line;
                if (std::getline(json_, line)) {
                    ++line_no_;
                    bytes_ += static_cast<int64_t>(line.size()) + 1;
                    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
                    r = {std::move(line), file_ - 1, line_no_};
                    return true;
                }
                MWB_CHECK(json_.eof(), "error reading '{}'", o_.inputs[file_ - 1]);
                json_.close();
            }
            if (file_ == o_.inputs.size()) return false;
            open_next();
        }
    }
    int64_t bytes() const { return bytes_; }

private:
    void open_next() {
        const std::string& path = o_.inputs[file_++];
        if (is_json_lines(path)) {
            json_.open(path, std::ios::binary);
            MWB_CHECK(json_.is_open(), "cannot open input '{}'", path);
            line_no_ = 0;
            return;
        }
        std::string text = read_file(path, std::size_t{1} << 40);
        bytes_ += static_cast<int64_t>(text.size());
        if (o_.text_unit == TextUnit::File) {
            pending_.push_back({std::move(text), file_ - 1, 0});
            return;
        }
        // Lines: every non-blank line. Paragraphs: runs of non-blank lines, joined by their newlines.
        std::size_t pos = 0, para_begin = std::string::npos, para_end = 0;
        while (pos < text.size()) {
            std::size_t eol = text.find('\n', pos);
            if (eol == std::string::npos) eol = text.size();
            const std::string_view line(text.data() + pos, eol - pos);
            const bool blank = line.find_first_not_of(" \t\r") == std::string_view::npos;
            if (o_.text_unit == TextUnit::Line) {
                if (!blank) pending_.push_back({std::string(line), file_ - 1, 0});
            } else if (blank) {
                if (para_begin != std::string::npos)
                    pending_.push_back({text.substr(para_begin, para_end - para_begin), file_ - 1, 0});
                para_begin = std::string::npos;
            } else {
                if (para_begin == std::string::npos) para_begin = pos;
                para_end = eol;
            }
            pos = eol + 1;
        }
        if (para_begin != std::string::npos)
            pending_.push_back({text.substr(para_begin, para_end - para_begin), file_ - 1, 0});
    }

    const PreprocessOptions& o_;
    std::size_t file_ = 0;
    std::ifstream json_;
    int64_t line_no_ = 0, bytes_ = 0;
    std::deque<Record> pending_;
};

// One progress line on stderr, redrawn in place on a terminal, every 10 s otherwise.
class Progress {
public:
    Progress(bool enabled, int64_t total_bytes) : enabled_(enabled), total_(total_bytes), tty_(::isatty(2) == 1) {}
    void update(int64_t bytes, int64_t docs, int64_t tokens, bool done = false) {
        if (!enabled_) return;
        const auto now = std::chrono::steady_clock::now();
        const double since = std::chrono::duration<double>(now - last_).count();
        if (!done && since < (tty_ ? 0.5 : 10.0)) return;
        last_ = now;
        const double secs = std::max(1e-9, std::chrono::duration<double>(now - start_).count());
        std::fprintf(stderr, "%spreprocess: %5.1f%% of %.1f MB, %lld documents, %lld tokens, %.1f MB/s%s",
                     tty_ ? "\r" : "",
                     total_ > 0 ? 100.0 * static_cast<double>(bytes) / static_cast<double>(total_) : 100.0,
                     static_cast<double>(total_) / 1e6, static_cast<long long>(docs), static_cast<long long>(tokens),
                     static_cast<double>(bytes) / 1e6 / secs, tty_ && !done ? "   " : "\n");
        std::fflush(stderr);
    }

private:
    bool enabled_;
    int64_t total_;
    bool tty_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_ = start_;
};

void encode_record(const PreprocessOptions& o, const Tokenizer& tok, const Record& r,
                   std::vector<EncodedDocument>& out) {
    const std::string& file = o.inputs[r.file];
    try {
        if (r.line == 0) {
            out.resize(1);
            encode_text(tok, r.text, o.append_eod, out[0]);
            return;
        }
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(r.text);
        } catch (const nlohmann::json::exception& e) {
            MWB_FAIL("not valid JSON ({})", e.what());
        }
        MWB_CHECK(j.is_object(), "expected a JSON object like {{\"text\": \"...\"}}");
        out.resize(o.json_keys.size());
        for (std::size_t k = 0; k < o.json_keys.size(); ++k) {
            const auto it = j.find(o.json_keys[k]);
            MWB_CHECK(it != j.end(), "no key '{}' (see --json-keys)", o.json_keys[k]);
            EncodedDocument& doc = out[k];
            if (it->is_string()) {
                encode_text(tok, it->get_ref<const std::string&>(), o.append_eod, doc);
                continue;
            }
            MWB_CHECK(it->is_array(), "key '{}' is neither a string nor a list of strings", o.json_keys[k]);
            doc.tokens.clear();
            doc.lengths.clear();
            for (const auto& sentence : *it) {  // Megatron's pre-split sentences: one sequence each
                MWB_CHECK(sentence.is_string(), "key '{}' holds a list with a non-string", o.json_keys[k]);
                const std::size_t before = doc.tokens.size();
                tok.encode(sentence.get_ref<const std::string&>(), doc.tokens);
                if (doc.tokens.size() > before) doc.lengths.push_back(static_cast<int32_t>(doc.tokens.size() - before));
            }
            if (!doc.tokens.empty() && o.append_eod) {
                doc.tokens.push_back(tok.eod());
                ++doc.lengths.back();
            }
        }
    } catch (const Error& e) {
        if (r.line > 0) MWB_FAIL("{}:{}: {}", file, r.line, e.what());
        MWB_FAIL("{}: {}", file, e.what());
    }
}

}  // namespace

PreprocessResult preprocess(const PreprocessOptions& o, const Tokenizer& tok) {
    MWB_CHECK(!o.inputs.empty(), "preprocess: no input files");
    MWB_CHECK(!o.output_prefix.empty(), "preprocess: no output prefix");
    MWB_CHECK(!o.json_keys.empty(), "preprocess: no JSON keys");
    int64_t total = 0;
    for (const std::string& in : o.inputs) {
        std::error_code ec;
        const auto size = fs::file_size(in, ec);
        MWB_CHECK(!ec, "cannot read input '{}': {}", in, ec.message());
        total += static_cast<int64_t>(size);
    }
    const auto started = std::chrono::steady_clock::now();
    const int workers = o.workers > 0 ? o.workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    bool any_json = false;
    for (const std::string& in : o.inputs) any_json |= is_json_lines(in);
    const std::size_t outputs = any_json ? o.json_keys.size() : 1;

    PreprocessResult result;
    std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
    for (std::size_t k = 0; k < outputs; ++k) {
        result.prefixes.push_back(fmt::format("{}_{}_document", o.output_prefix, o.json_keys[k]));
        builders.push_back(
            std::make_unique<IndexedDatasetBuilder>(result.prefixes.back(), optimal_dtype(tok.vocab_size())));
    }

    RecordReader reader(o);
    Progress progress(o.progress, total);
    std::vector<Record> batch;
    std::vector<std::vector<EncodedDocument>> encoded;
    constexpr std::size_t kBatchBytes = std::size_t{8} << 20, kBatchRecords = 16384;
    while (true) {
        batch.clear();
        std::size_t bytes = 0;
        Record r;
        while (bytes < kBatchBytes && batch.size() < kBatchRecords && reader.next(r)) {
            bytes += r.text.size();
            batch.push_back(std::move(r));
        }
        if (batch.empty()) break;
        encoded.resize(batch.size());
        parallel_for(static_cast<int64_t>(batch.size()), workers,
                     [&](int64_t i) { encode_record(o, tok, batch[i], encoded[i]); });
        for (std::size_t i = 0; i < batch.size(); ++i) {
            // A plain text record feeds the first output only.
            for (std::size_t k = 0; k < encoded[i].size(); ++k) {
                builders[k]->add_document(encoded[i][k].tokens, encoded[i][k].lengths);
                result.tokens += static_cast<int64_t>(encoded[i][k].tokens.size());
            }
            ++result.documents;
        }
        progress.update(reader.bytes(), result.documents, result.tokens);
    }
    for (auto& b : builders) b->finalize();
    result.bytes = reader.bytes();
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    progress.update(result.bytes, result.documents, result.tokens, true);
    return result;
}

}  // namespace mwb::data
