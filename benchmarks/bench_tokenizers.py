"""Tokenizer encode speed, side by side with the independent implementations, on the KJV text.

  /usr/bin/python3 benchmarks/bench_tokenizers.py [BUILD_DIR] [--repeat 5] [--workers N]

For each family: `mwb-data bench-tokenizer` (MB/s with 1 thread and with N threads, median of the
repeats, word caches cold) and, in the same run, the reference the exact-id tests compare against,
timed on its encode loop only (loading excluded), single-threaded as it runs:
  HuggingFaceTokenizer   Hugging Face's tokenizers.js (node)    Llama 3, Qwen2.5, GPT-2, Llama 2
  TikTokenizer           js-tiktoken (node), cl100k in Megatron's format, v1 and v2
  SentencePieceTokenizer Google's sentencepiece (python3-sentencepiece), models trained on the corpus
  GPT2BPETokenizer       (for scale; its reference is the same tokenizers.js GPT-2 row)
Needs scripts/fetch-tokenizers.sh and scripts/fetch-gpt2-vocab.sh; prints a Markdown table.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ref_dir = os.path.join(root, "tests", "backend", "data", "reference")
cache = os.path.join(os.environ.get("XDG_DATA_HOME", os.path.expanduser("~/.local/share")), "mwb", "tokenizers")

ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default=os.path.join(root, "build"))
ap.add_argument("--repeat", type=int, default=5)
ap.add_argument("--workers", type=int, default=os.cpu_count())
args = ap.parse_args()
tool = os.path.join(args.build, "backend", "data", "mwb-data")
tmp = tempfile.mkdtemp(prefix="mwb-bench-tok-")
kjv = os.path.join(tmp, "kjv.txt")
subprocess.run([tool, "corpus", "--write-text", kjv], check=True, stdout=subprocess.DEVNULL)
text = open(kjv, encoding="utf-8").read()
mb = len(text.encode("utf-8")) / 1e6
texts_file = os.path.join(tmp, "texts.json")
json.dump(text.split("\n\n"), open(texts_file, "w"))


def ours(*tok_args):
    out = subprocess.run([tool, "bench-tokenizer", *tok_args, "--workers", f"1,{args.workers}", "--repeat",
                          str(args.repeat), kjv], capture_output=True, text=True).stdout
    speeds = re.findall(r"encode +(\d+) threads? *: +([\d.]+) MB/s median", out)
    assert len(speeds) == 2, out  # (a normalising tokenizer may not round trip: exit status 1)
    return float(speeds[0][1]), float(speeds[1][1])


def reference(cmd, out_file):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return mb / json.load(open(out_file))["seconds"]


rows = []
js = os.path.join(cache, "js")
for name in ["llama3", "qwen2_5", "gpt2", "llama2"]:
    d = os.path.join(cache, "hf", name)
    one, all_ = ours("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", d)
    out = os.path.join(tmp, "out.json")
    ref = reference(["node", os.path.join(ref_dir, "tokenize.mjs"), "hf", js, d, texts_file, out], out)
    rows.append((f"HuggingFaceTokenizer {name}", one, all_, "tokenizers.js 0.2.0", ref))
for pattern in ["v1", "v2"]:
    out, vocab = os.path.join(tmp, "out.json"), os.path.join(tmp, "tiktoken.json")
    ref = reference(["node", os.path.join(ref_dir, "tokenize.mjs"), "tiktoken", js, pattern, "1000", texts_file,
                     out, vocab], out)
    one, all_ = ours("--tokenizer-type", "TikTokenizer", "--tokenizer-model", vocab, "--tiktoken-pattern", pattern)
    rows.append((f"TikTokenizer {pattern} (cl100k ranks)", one, all_, "js-tiktoken 1.0.21", ref))
subprocess.run(["/usr/bin/python3", os.path.join(ref_dir, "sentencepiece_reference.py"), kjv, texts_file, tmp],
               check=True)
for model in ["bpe", "unigram"]:
    ref = mb / json.load(open(os.path.join(tmp, model + ".json")))["seconds"]
    one, all_ = ours("--tokenizer-type", "SentencePieceTokenizer", "--tokenizer-model",
                     os.path.join(tmp, model + ".model"))
    rows.append((f"SentencePieceTokenizer {model} (2000 pieces)", one, all_, "python3-sentencepiece 0.1.97", ref))
g = os.path.join(cache, "gpt2")
one, all_ = ours("--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", os.path.join(g, "vocab.json"),
                 "--merge-file", os.path.join(g, "merges.txt"))
rows.append(("GPT2BPETokenizer", one, all_, "", float("nan")))

print(f"KJV {mb:.2f} MB, median of {args.repeat}, {args.workers} threads for 'all'")
print("| tokenizer | mwb, 1 thread | mwb, all threads | reference | reference, 1 thread |")
print("| --- | ---: | ---: | --- | ---: |")
for name, one, all_, ref_name, ref in rows:
    ref_s = "" if ref != ref else f"{ref:.2f} MB/s"
    print(f"| {name} | {one:.1f} MB/s | {all_:.1f} MB/s | {ref_name} | {ref_s} |")
