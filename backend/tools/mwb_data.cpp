// mwb-data: prepares and inspects datasets in Megatron-LM's indexed format.
//   mwb-data preprocess --input a.jsonl ... --output-prefix out --tokenizer-type GPT2BPETokenizer ...
//   mwb-data info PREFIX ...
//   mwb-data corpus [--tokenizer-type ...] [--write-text FILE]
//   mwb-data bench-tokenizer [--tokenizer-type ...] [--workers 1,2] FILE
//   mwb-data tokenize [--tokenizer-type ...] TEXT | --file FILE
#include "backend/config/config.h"
#include "backend/data/bundled_corpus.h"
#include "backend/data/indexed_dataset.h"
#include "backend/data/preprocess.h"
#include "backend/data/tokenizer.h"
#include "mwb/kernels/error.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

namespace {

using namespace mwb;
using namespace mwb::data;

struct TokenizerArgs {
    DataConfig data;
    ModelConfig model;
    void add_to(CLI::App& app) {
        app.add_option("--tokenizer-type", data.tokenizer_type,
                       "ByteTokenizer | GPT2BPETokenizer | NullTokenizer | HuggingFaceTokenizer | "
                       "SentencePieceTokenizer | TikTokenizer")
            ->capture_default_str();
        app.add_option("--vocab-file", data.vocab_file, "GPT-2 vocab.json (GPT2BPETokenizer)");
        app.add_option("--merge-file", data.merge_file, "GPT-2 merges.txt (GPT2BPETokenizer)");
        app.add_option("--tokenizer-model", data.tokenizer_model,
                       "tokenizer.json or its directory | tokenizer.model | tiktoken JSON ranks");
        app.add_option("--tiktoken-pattern", data.tiktoken_pattern, "TikTokenizer pattern: v1 | v2")
            ->capture_default_str();
        app.add_option("--tiktoken-num-special-tokens", data.tiktoken_num_special_tokens,
                       "TikTokenizer special ids before the first rank")
            ->capture_default_str();
        app.add_option("--vocab-size", model.vocab_size, "token ids, EOD included (NullTokenizer)");
        app.add_option("--null-tokenizer-eod-id", data.null_tokenizer_eod_id,
                       "NullTokenizer's EOD id; -1 = vocab_size - 1")
            ->capture_default_str();
        app.add_flag("--null-tokenizer-legacy-eod", data.null_tokenizer_legacy_eod,
                     "NullTokenizer before Megatron-LM core_v0.18: vocab_size + 1 ids, EOD = vocab_size");
    }
    std::unique_ptr<Tokenizer> make() const { return make_tokenizer(data, model); }
};

int hardware_threads() {
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void print_info(const std::string& prefix) {
    const IndexedDataset ds(prefix);
    int64_t lo = 0, hi = 0;
    for (int64_t i = 0; i < ds.sequence_count(); ++i) {
        const int64_t len = ds.sequence_length(i);
        lo = i == 0 ? len : std::min(lo, len);
        hi = std::max(hi, len);
    }
    const double mean =
        ds.sequence_count() ? static_cast<double>(ds.token_count()) / static_cast<double>(ds.sequence_count()) : 0.0;
    fmt::print("prefix     {}\n", prefix);
    fmt::print("dtype      {} (code {})\n", dtype_name(ds.dtype()), static_cast<int>(ds.dtype()));
    fmt::print("documents  {}\n", ds.document_count());
    fmt::print("sequences  {}\n", ds.sequence_count());
    fmt::print("tokens     {}\n", ds.token_count());
    fmt::print("length     min {}, mean {:.1f}, max {} tokens per sequence\n", lo, mean, hi);
    fmt::print("files      {} ({} bytes), {} ({} bytes)\n", idx_path(prefix).string(), fs::file_size(idx_path(prefix)),
               bin_path(prefix).string(), fs::file_size(bin_path(prefix)));
}

// Cuts text into chunks of about `target` bytes at line ends, the units the threads share.
std::vector<std::string_view> chunks_of(std::string_view text, std::size_t target) {
    std::vector<std::string_view> out;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t end = std::min(text.size(), pos + target);
        const std::size_t nl = text.find('\n', end);
        end = nl == std::string_view::npos ? text.size() : nl + 1;
        out.push_back(text.substr(pos, end - pos));
        pos = end;
    }
    return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int bench_tokenizer(const Tokenizer& tok, const std::string& file, std::vector<int> workers, int repeat) {
    const std::string text = read_file(file, std::size_t{1} << 34);
    const auto chunks = chunks_of(text, 64 * 1024);
    const double mb = static_cast<double>(text.size()) / 1e6;
    fmt::print("bench-tokenizer: {} on {} ({:.2f} MB in {} chunks of ~64 KB, median and best of {} cold runs)\n",
               tok.name(), file, mb, chunks.size(), repeat);
    std::vector<std::vector<int32_t>> ids(chunks.size());
    int64_t tokens = 0;
    for (const int threads : workers) {
        std::vector<double> times;
        for (int r = 0; r < repeat; ++r) {
            // Fresh threads every run: their word caches start empty, as when preprocessing a new corpus.
            const auto t0 = std::chrono::steady_clock::now();
            parallel_for(static_cast<int64_t>(chunks.size()), threads, [&](int64_t i) {
                ids[i].clear();
                tok.encode(chunks[i], ids[i]);
            });
            times.push_back(seconds_since(t0));
        }
        std::sort(times.begin(), times.end());
        const double median = times[times.size() / 2], best = times.front();
        tokens = 0;
        for (const auto& v : ids) tokens += static_cast<int64_t>(v.size());
        fmt::print("  encode {} thread{}: {:8.2f} MB/s median, {:8.2f} best  ({} tokens, {:.2f} bytes/token)\n",
                   threads, threads == 1 ? " " : "s", mb / median, mb / best, tokens,
                   static_cast<double>(text.size()) / static_cast<double>(std::max<int64_t>(1, tokens)));
    }
    std::string back;
    back.reserve(text.size());
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& v : ids) tok.decode(v, back);
    fmt::print("  decode 1 thread : {:8.2f} MB/s\n", mb / seconds_since(t0));
    const bool same = back == text;
    fmt::print("  round trip: {}\n", same ? "decode(encode(text)) == text" : "MISMATCH");
    return same ? 0 : 1;
}

// Prints the tokenizer's sizes and special ids, then each id of the text with the bytes it stands for.
void print_tokens(const Tokenizer& tok, const std::string& text) {
    const std::vector<int32_t> ids = tok.encode(text);
    fmt::print("{}: vocab_size {}, eod {}, bos {}, {} ids for {} bytes\n", tok.name(), tok.vocab_size(), tok.eod(),
               tok.bos(), ids.size(), text.size());
    for (const int32_t id : ids) {
        std::string piece = tok.decode(std::span<const int32_t>(&id, 1));
        std::string shown;
        for (const char c : piece) {
            const auto u = static_cast<unsigned char>(c);
            if (u < 0x20 || u == 0x7F)
                shown += fmt::format("\\x{:02x}", u);
            else
                shown.push_back(c);
        }
        fmt::print("{:>8}  '{}'\n", id, shown);
    }
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"mwb-data: prepare and inspect datasets in Megatron-LM's indexed format (.bin + .idx)", "mwb-data"};
    app.require_subcommand(1);

    auto* pre = app.add_subcommand("preprocess", "Tokenise text or JSON lines into PREFIX_{key}_document.{bin,idx}");
    PreprocessOptions popt;
    TokenizerArgs ptok;
    std::string text_unit = "file";
    pre->add_option("--input", popt.inputs, "Input files: .json/.jsonl (one JSON object per line) or plain text")
        ->required()
        ->check(CLI::ExistingFile);
    pre->add_option("--output-prefix", popt.output_prefix, "Output path prefix")->required();
    pre->add_option("--json-keys", popt.json_keys, "Keys to read from each JSON line")->capture_default_str();
    pre->add_flag("--append-eod", popt.append_eod, "End every document with the end-of-document id");
    pre->add_option("--workers", popt.workers, "Tokenising threads (default: every core)");
    pre->add_option("--text-unit", text_unit, "A document in plain text files: file | paragraph | line")
        ->check(CLI::IsMember({"file", "paragraph", "line"}))
        ->capture_default_str();
    ptok.add_to(*pre);

    auto* info = app.add_subcommand("info", "Print the counts of indexed datasets");
    std::vector<std::string> info_prefixes;
    info->add_option("prefix", info_prefixes, "Dataset prefixes (PREFIX.bin + PREFIX.idx)")->required();

    auto* corpus = app.add_subcommand("corpus", "Prepare the bundled corpus (King James Bible) and print its prefix");
    TokenizerArgs ctok;
    std::string write_text;
    ctok.add_to(*corpus);
    corpus->add_option("--write-text", write_text, "Also write the corpus text to this file");

    auto* bench = app.add_subcommand("bench-tokenizer", "Measure encoding speed (MB/s) on a text file");
    TokenizerArgs btok;
    std::string bench_file;
    std::vector<int> bench_workers{1, hardware_threads()};
    int repeat = 3;
    btok.add_to(*bench);
    bench->add_option("--workers", bench_workers, "Thread counts to measure")->delimiter(',')->capture_default_str();
    bench->add_option("--repeat", repeat, "Runs per thread count (the best is shown)")->capture_default_str();
    bench->add_option("file", bench_file, "Text file")->required()->check(CLI::ExistingFile);

    auto* tokenize = app.add_subcommand("tokenize", "Show the ids of a text and what each stands for");
    TokenizerArgs ttok;
    std::string tokenize_text, tokenize_file;
    ttok.add_to(*tokenize);
    tokenize->add_option("text", tokenize_text, "Text to encode");
    tokenize->add_option("--file", tokenize_file, "Encode this file instead")->check(CLI::ExistingFile);

    CLI11_PARSE(app, argc, argv);
    try {
        if (pre->parsed()) {
            popt.text_unit = text_unit == "line"        ? TextUnit::Line
                             : text_unit == "paragraph" ? TextUnit::Paragraph
                                                        : TextUnit::File;
            const auto tok = ptok.make();
            const PreprocessResult r = preprocess(popt, *tok);
            fmt::print(stderr, "preprocess: {} documents, {} tokens from {:.1f} MB in {:.1f} s ({:.1f} MB/s)\n",
                       r.documents, r.tokens, static_cast<double>(r.bytes) / 1e6, r.seconds,
                       static_cast<double>(r.bytes) / 1e6 / std::max(r.seconds, 1e-9));
            for (const std::string& p : r.prefixes) fmt::print("{}\n", p);
        } else if (info->parsed()) {
            for (std::size_t i = 0; i < info_prefixes.size(); ++i) {
                if (i) fmt::print("\n");
                print_info(info_prefixes[i]);
            }
        } else if (corpus->parsed()) {
            const auto tok = ctok.make();
            if (!write_text.empty()) {
                std::string text;
                for (const std::string& chapter : read_kjv_chapters()) text += chapter + "\n";
                write_file_atomic(write_text, text);
            }
            fmt::print("{}\n", ensure_bundled_corpus(*tok));
        } else if (tokenize->parsed()) {
            print_tokens(*ttok.make(), tokenize_file.empty() ? tokenize_text : read_file(tokenize_file));
        } else if (bench->parsed()) {
            return bench_tokenizer(*btok.make(), bench_file, bench_workers, std::max(1, repeat));
        }
    } catch (const std::exception& e) {
        std::cerr << "mwb-data: error: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
