#include "data/byte_tokenizer.h"

#include "mwb/kernels/error.h"

namespace mwb::data {

void ByteTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
    const std::size_t base = out.size();
    out.resize(base + text.size());
    for (std::size_t i = 0; i < text.size(); ++i) out[base + i] = static_cast<unsigned char>(text[i]);
}

void ByteTokenizer::decode(std::span<const int32_t> ids, std::string& out) const {
    out.reserve(out.size() + ids.size());
    for (const int32_t id : ids) {
        if (id == kEod) continue;
        MWB_CHECK(id >= 0 && id < 256, "ByteTokenizer: id {} is outside the vocabulary [0, 257)", id);
        out.push_back(static_cast<char>(id));
    }
}

}  // namespace mwb::data
