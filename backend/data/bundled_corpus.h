#pragma once
// The corpus the embedded demo trains on when data_path is empty: the King James Bible (public domain)
// from Debian's bible-kjv + bible-kjv-text, one document per chapter (1189 of them, about 4.3 MB of
// text). Prepared on first use into user_data_dir()/data/kjv/, once per tokenizer; concurrent first
// uses are safe (every file is written to a temporary name and renamed into place).
#include "backend/core/files.h"
#include "backend/data/tokenizer.h"

#include <string>
#include <vector>

namespace mwb::data {

/// user_data_dir()/data/kjv
fs::path bundled_corpus_dir();

/// The text, one string per chapter ("Genesis 1\n\n  1 In the beginning ..."), read with the `bible`
/// program; throws mwb::Error with the packages to install when it is missing.
std::vector<std::string> read_kjv_chapters();

/// Prefix of the corpus tokenised with `tok`, building it first if needed (with a progress message on
/// stderr unless quiet). NullTokenizer cannot encode text and is refused.
std::string ensure_bundled_corpus(const Tokenizer& tok, bool quiet = false);

}  // namespace mwb::data
