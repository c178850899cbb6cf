#include "backend/data/sentencepiece_tokenizer.h"

#include "backend/data/regex_pretokenizer.h"
#include "mwb/kernels/error.h"

#include <sentencepiece_processor.h>
#include <xxhash.h>

namespace mwb::data {

struct SentencePieceTokenizer::Impl {
    sentencepiece::SentencePieceProcessor sp;  // Encode/Decode are const: safe from several threads
    std::string origin, fingerprint;
    int32_t eod = -1, bos = -1;
};

SentencePieceTokenizer::SentencePieceTokenizer(const fs::path& model_file) : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.origin = model_file.string();
    std::error_code ec;
    MWB_CHECK(fs::is_regular_file(model_file, ec),
              "tokenizer_model '{}': no such file (expected a SentencePiece tokenizer.model)", m.origin);
    const std::string bytes = read_file(model_file, std::size_t{1} << 30);
    const auto st = m.sp.LoadFromSerializedProto(bytes);
    MWB_CHECK(st.ok(), "{}: not a SentencePiece model ({})", m.origin, st.ToString());
    m.eod = m.sp.eos_id();
    m.bos = m.sp.bos_id();
    MWB_CHECK(m.eod >= 0, "{}: the SentencePiece model has no </s> (eos_id is -1); EOD needs one", m.origin);
    m.fingerprint = fmt::format("SentencePieceTokenizer-{:016x}", XXH3_64bits(bytes.data(), bytes.size()));
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

int64_t SentencePieceTokenizer::vocab_size() const {
    return impl_->sp.GetPieceSize();
}
int32_t SentencePieceTokenizer::eod() const {
    return impl_->eod;
}
int32_t SentencePieceTokenizer::bos() const {
    return impl_->bos;
}
std::string SentencePieceTokenizer::fingerprint() const {
    return impl_->fingerprint;
}

void SentencePieceTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
    check_utf8(text, "SentencePieceTokenizer");
    thread_local std::vector<int> ids;
    ids.clear();
    const auto st = impl_->sp.Encode(text, &ids);
    MWB_CHECK(st.ok(), "{}: encoding failed ({})", impl_->origin, st.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
}

void SentencePieceTokenizer::decode(std::span<const int32_t> ids, std::string& out) const {
    const int n = impl_->sp.GetPieceSize();
    for (const int32_t id : ids)
        MWB_CHECK(id >= 0 && id < n, "SentencePieceTokenizer: id {} is not in the vocabulary (size {})", id, n);
    std::string text;
    const auto st = impl_->sp.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    MWB_CHECK(st.ok(), "{}: decoding failed ({})", impl_->origin, st.ToString());
    out += text;
}

}  // namespace mwb::data
