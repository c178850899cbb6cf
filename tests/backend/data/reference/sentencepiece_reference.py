"""Reference ids for SentencePieceTokenizer, from Debian's python3-sentencepiece (Google's library).

  /usr/bin/python3 sentencepiece_reference.py CORPUS.txt TEXTS.json OUT_DIR

Trains two small models on CORPUS.txt (Llama-2-like BPE: identity normalisation, byte fallback,
split digits; and a default unigram model), writes OUT_DIR/{bpe,unigram}.model and, for each,
OUT_DIR/{bpe,unigram}.json = {"ids": [[...] per text], "seconds": encode time} with the ids sentencepiece gives TEXTS.json.
"""
import json
import os
import sys
import time

import sentencepiece as spm

corpus, texts_file, out_dir = sys.argv[1:4]
texts = json.load(open(texts_file, encoding="utf-8"))
common = dict(input=corpus, vocab_size=2000, minloglevel=2, num_threads=2, input_sentence_size=20000,
              shuffle_input_sentence=False)
models = {
    "bpe": dict(model_type="bpe", normalization_rule_name="identity", byte_fallback=True, split_digits=True,
                remove_extra_whitespaces=False, character_coverage=1.0),
    "unigram": dict(model_type="unigram"),
}
for name, options in models.items():
    prefix = os.path.join(out_dir, name)
    spm.SentencePieceTrainer.train(model_prefix=prefix, **common, **options)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    t0 = time.perf_counter()
    ids = [sp.encode(t) for t in texts]
    json.dump({"ids": ids, "seconds": time.perf_counter() - t0}, open(prefix + ".json", "w"))
