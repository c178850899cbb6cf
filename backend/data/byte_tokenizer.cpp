#include "backend/data/byte_tokenizer.h"

#include "mwb/kernels/error.h"

namespace mwb::data {

void ByteTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
    const std::size_t base = out.size();
    out.resize(base + text.size());
    for (std::size_t i = 0; i < text.size(); ++i) out[base + i] = static_cast<unsigned char>(text[i]);
}

void ByteTokenizer::decode(std::span<const int32_t> ids, std::string& out) const {
    std::size_t n = out.size();
    out.resize(n + ids.size());
    for (const int32_t id : ids) {
        if (static_cast<uint32_t>(id) < 256u) {
            out[n++] = static_cast<char>(id);
            continue;
        }
        MWB_CHECK(id == kEod, "ByteTokenizer: id {} is outside the vocabulary [0, 257)", id);
    }
    out.resize(n);
}

}  // namespace mwb::data
