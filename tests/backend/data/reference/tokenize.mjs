// Independent reference ids for the tokenizer tests and benchmarks, from JavaScript implementations
// nobody here wrote (fetched by scripts/fetch-tokenizers.sh into JS_DIR/node_modules):
//   node tokenize.mjs hf JS_DIR TOKENIZER_DIR TEXTS.json OUT.json
//       Hugging Face's tokenizers.js on TOKENIZER_DIR/tokenizer.json (no special tokens added).
//   node tokenize.mjs tiktoken JS_DIR v1|v2 NUM_SPECIAL TEXTS.json OUT.json VOCAB_OUT.json
//       js-tiktoken with the cl100k ranks reordered into Megatron-LM's TikTokenizer vocabulary (the
//       256 bytes first, then cl100k's longer tokens in rank order), written to VOCAB_OUT.json, and
//       Megatron's pattern; ids shifted by NUM_SPECIAL and special tokens allowed, as Megatron does.
// TEXTS.json is a list of strings; OUT.json receives {"ids": [[...], ...], "seconds": encode time}.
import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [mode, jsDir, ...rest] = process.argv.slice(2);
const mod = (p) => import(pathToFileURL(join(jsDir, "node_modules", p)).href);

function run(texts, encode) {
  const t0 = performance.now();
  const ids = texts.map(encode);
  return { ids, seconds: (performance.now() - t0) / 1000 };
}

if (mode === "hf") {
  const [tokDir, textsFile, outFile] = rest;
  const { Tokenizer } = await mod("@huggingface/tokenizers/dist/tokenizers.mjs");
  const json = JSON.parse(readFileSync(join(tokDir, "tokenizer.json"), "utf8"));
  const config = JSON.parse(readFileSync(join(tokDir, "tokenizer_config.json"), "utf8"));
  const tok = new Tokenizer(json, config);
  const texts = JSON.parse(readFileSync(textsFile, "utf8"));
  const out = run(texts, (t) => tok.encode(t, { add_special_tokens: false }).ids);
  writeFileSync(outFile, JSON.stringify(out));
} else if (mode === "tiktoken") {
  const [pattern, numSpecialStr, textsFile, outFile, vocabOut] = rest;
  const numSpecial = Number(numSpecialStr);
  const { Tiktoken } = await mod("js-tiktoken/dist/lite.js");
  const cl100k = (await mod("js-tiktoken/dist/ranks/cl100k_base.js")).default;
  const byRank = [];
  for (const line of cl100k.bpe_ranks.split("\n").filter(Boolean)) {
    const [, offset, ...tokens] = line.split(" ");
    tokens.forEach((t, i) => (byRank[Number(offset) + i] = t));
  }
  const single = new Map();  // byte -> base64
  const longer = [];
  for (const t of byRank) {
    const bytes = Buffer.from(t, "base64");
    if (bytes.length === 1) single.set(bytes[0], t);
    else longer.push(t);
  }
  const vocab = [];
  for (let b = 0; b < 256; ++b) vocab.push(single.get(b));
  vocab.push(...longer);
  writeFileSync(vocabOut, JSON.stringify(vocab.map((t, rank) => (
    { rank, token_bytes: t, token_str: Buffer.from(t, "base64").toString("latin1") }))));
  // Megatron-LM's patterns; v1's possessive quantifiers (not in JavaScript) dropped: with these
  // branches backtracking cannot change the match.
  const v1 = String.raw`[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`;
  const v2 = String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
  const names = ["<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"];
  for (let i = names.length; i < numSpecial; ++i) names.push(`<SPECIAL_${i}>`);
  const SPECIAL = 1e9;  // js-tiktoken's ids for the special tokens, mapped back below
  const special_tokens = Object.fromEntries(names.map((n, i) => [n, SPECIAL + i]));
  const enc = new Tiktoken({ pat_str: pattern === "v1" ? v1 : v2, special_tokens,
                             bpe_ranks: "! 0 " + vocab.join(" ") });
  const texts = JSON.parse(readFileSync(textsFile, "utf8"));
  const out = run(texts, (t) => enc.encode(t, "all").map((id) => (id >= SPECIAL ? id - SPECIAL : id + numSpecial)));
  writeFileSync(outFile, JSON.stringify(out));
} else {
  console.error("usage: node tokenize.mjs hf|tiktoken JS_DIR ...");
  process.exit(2);
}
