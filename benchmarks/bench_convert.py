"""mwb-convert import-hf / export-hf speed on a Llama-shaped BF16 checkpoint, against copying its files.

  /usr/bin/python3 benchmarks/bench_convert.py [BUILD_DIR] [--repeat 3] [--layers 12] [--hidden 768]

Writes a random LlamaForCausalLM directory (GQA 12/4 heads, MLP 2048, vocabulary 32000, untied; BF16, two
shards with an index, by the tests' independent numpy writer), then times, median of the repeats, in one
run: `cp` of the weight files (page cache, no fsync), `dd conv=fsync` of as many bytes as the float32
checkpoint holds (the disk's durable write: both tools fsync what they write), `import-hf` (map the shards,
convert, write the float32 checkpoint) and `export-hf --dtype BF16` (read the checkpoint, convert, write
the shards). Prints a Markdown table of seconds and MB/s of BF16 weights.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(root, "tests", "backend", "interop"))
from safetensors_reference import write  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default=os.path.join(root, "build"))
ap.add_argument("--repeat", type=int, default=3)
ap.add_argument("--layers", type=int, default=12)
ap.add_argument("--hidden", type=int, default=768)
args = ap.parse_args()
tool = os.path.join(args.build, "backend", "mwb-convert")
L, H, A, G, F, V = args.layers, args.hidden, 12, 4, 2048, 32000
D = H // A
rng = np.random.default_rng(0)


def bf16(*shape):
    return (rng.standard_normal(shape, dtype=np.float32) * 0.02).view(np.uint32).__rshift__(16).astype("<u2")


tmp = tempfile.mkdtemp(prefix="mwb-bench-convert-")
src = os.path.join(tmp, "hf")
os.makedirs(src)
tensors = [("model.embed_tokens.weight", bf16(V, H))]
for i in range(L):
    p = f"model.layers.{i}."
    tensors += [(p + "input_layernorm.weight", bf16(H)), (p + "self_attn.q_proj.weight", bf16(A * D, H)),
                (p + "self_attn.k_proj.weight", bf16(G * D, H)), (p + "self_attn.v_proj.weight", bf16(G * D, H)),
                (p + "self_attn.o_proj.weight", bf16(H, A * D)), (p + "post_attention_layernorm.weight", bf16(H)),
                (p + "mlp.gate_proj.weight", bf16(F, H)), (p + "mlp.up_proj.weight", bf16(F, H)),
                (p + "mlp.down_proj.weight", bf16(H, F))]
tensors += [("model.norm.weight", bf16(H)), ("lm_head.weight", bf16(V, H))]
raw = [(n, "BF16", list(t.shape), t.tobytes()) for n, t in tensors]
half = len(raw) // 2
files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
weight_map = {}
for f, part in zip(files, (raw[:half], raw[half:])):
    write(os.path.join(src, f), part, {"format": "pt"})
    weight_map.update({t[0]: f for t in part})
json.dump({"metadata": {"total_size": sum(len(t[3]) for t in raw)}, "weight_map": weight_map},
          open(os.path.join(src, "model.safetensors.index.json"), "w"))
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": L, "hidden_size": H,
           "num_attention_heads": A, "num_key_value_heads": G, "intermediate_size": F, "vocab_size": V,
           "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "tie_word_embeddings": False}, open(os.path.join(src, "config.json"), "w"))
params = sum(np.prod(t[2]) for t in raw)
mb = sum(len(t[3]) for t in raw) / 1e6


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


rows = {"cp of the weight files (no fsync)": [], "dd conv=fsync of the checkpoint's size": [], "import-hf": [],
        "export-hf --dtype BF16": []}
for r in range(args.repeat):
    for d in ("copy", "ckpt", "out"):
        shutil.rmtree(os.path.join(tmp, d), ignore_errors=True)
    os.makedirs(os.path.join(tmp, "copy"))
    rows["cp of the weight files (no fsync)"].append(
        timed(["cp"] + [os.path.join(src, f) for f in files] + [os.path.join(tmp, "copy")]))
    rows["dd conv=fsync of the checkpoint's size"].append(
        timed(["dd", "if=/dev/zero", "of=" + os.path.join(tmp, "copy", "dd"), "bs=1M", f"count={int(2 * mb)}",
               "conv=fsync", "status=none"]))
    rows["import-hf"].append(timed([tool, "import-hf", src, "--save", os.path.join(tmp, "ckpt")]))
    rows["export-hf --dtype BF16"].append(
        timed([tool, "export-hf", os.path.join(tmp, "ckpt"), "--output", os.path.join(tmp, "out"), "--dtype", "BF16"]))
print(f"{params / 1e6:.1f}M parameters, {mb:.0f} MB of BF16 weights, median of {args.repeat}\n")
print("| step | seconds | MB/s of BF16 weights |\n| --- | --- | --- |")
for name, ts in rows.items():
    m = statistics.median(ts)
    print(f"| {name} | {m:.2f} | {mb / m:.0f} |")
shutil.rmtree(tmp, ignore_errors=True)
