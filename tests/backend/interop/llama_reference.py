"""Tiny Llama-family checkpoints in Hugging Face's conventions and their logits, in float64 PyTorch.

  /usr/bin/python3 llama_reference.py OUT_DIR

Writes three Hugging Face model directories, each sharded into model-0000{1,2}-of-00002.safetensors with a
model.safetensors.index.json (by the independent numpy writer, safetensors_reference.py):
  OUT_DIR/llama   LlamaForCausalLM, F32: grouped-query attention (4 heads, 2 key/value heads), head_dim 12
                  (not hidden/heads), untied lm_head, rope_scaling llama3 (factor 8), rope_theta 500000
  OUT_DIR/qwen2   Qwen2ForCausalLM, BF16 (rounded by torch): q/k/v biases, 2 key/value heads, tied, and a
                  tiny tokenizer.json + tokenizer_config.json (<s> = 1, </s> = 2, 200 ids)
  OUT_DIR/biased  LlamaForCausalLM, F16: attention_bias and mlp_bias (every projection has a bias)
and OUT_DIR/reference.json: the dims, the (B, S+1) tokens, and per directory the file of the float64
logits (B, S, vocab) of the first S tokens, little-endian float64, from a forward written here from Hugging
Face's modeling_llama / modeling_qwen2 definitions (not from mwb's code): RMSNorm, rotate_half RoPE with
the llama3 frequency scaling, repeat_kv grouped-query attention, SwiGLU (down(silu(gate) * up)).
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_reference import write  # noqa: E402  (the independent safetensors writer)

L, H, V, B, S, P = 2, 32, 200, 2, 24, 64
out = sys.argv[1]
g = torch.Generator().manual_seed(14)


def rnd(*shape, std=0.2):
    return torch.randn(*shape, generator=g, dtype=torch.float64) * std


VARIANTS = {
    "llama": dict(arch="LlamaForCausalLM", model_type="llama", A=4, G=2, D=12, F=40, tied=False, dtype="F32",
                  theta=500000.0, eps=1e-5, scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                  qkv_bias=False, all_bias=False),
    "qwen2": dict(arch="Qwen2ForCausalLM", model_type="qwen2", A=4, G=2, D=8, F=48, tied=True, dtype="BF16",
                  theta=10000.0, eps=1e-6, scaling=None, qkv_bias=True, all_bias=False),
    "biased": dict(arch="LlamaForCausalLM", model_type="llama", A=4, G=4, D=8, F=40, tied=False, dtype="F16",
                   theta=10000.0, eps=1e-6, scaling=None, qkv_bias=True, all_bias=True),
}


def weights(v):
    A, G, D, F = v["A"], v["G"], v["D"], v["F"]
    w = {"model.embed_tokens.weight": rnd(V, H, std=0.5), "model.norm.weight": 1 + rnd(H, std=0.1)}
    for i in range(L):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + rnd(H, std=0.1)
        for n, rows in (("q", A * D), ("k", G * D), ("v", G * D)):
            w[p + f"self_attn.{n}_proj.weight"] = rnd(rows, H)
            if v["qkv_bias"]:
                w[p + f"self_attn.{n}_proj.bias"] = rnd(rows, std=0.1)
        w[p + "self_attn.o_proj.weight"] = rnd(H, A * D)
        if v["all_bias"]:
            w[p + "self_attn.o_proj.bias"] = rnd(H, std=0.1)
        w[p + "post_attention_layernorm.weight"] = 1 + rnd(H, std=0.1)
        w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"] = rnd(F, H), rnd(F, H)
        w[p + "mlp.down_proj.weight"] = rnd(H, F)
        if v["all_bias"]:
            w[p + "mlp.gate_proj.bias"], w[p + "mlp.up_proj.bias"] = rnd(F, std=0.1), rnd(F, std=0.1)
            w[p + "mlp.down_proj.bias"] = rnd(H, std=0.1)
    if not v["tied"]:
        w["lm_head.weight"] = rnd(V, H, std=0.5)
    return w


def inv_freq(v):
    D = v["D"]
    f = 1.0 / (v["theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    s = v["scaling"]
    if s:  # transformers' _compute_llama3_parameters
        low_wl = s["original_max_position_embeddings"] / s["low_freq_factor"]
        high_wl = s["original_max_position_embeddings"] / s["high_freq_factor"]
        wavelen = 2 * math.pi / f
        scaled = torch.where(wavelen > low_wl, f / s["factor"], f)
        smooth = (s["original_max_position_embeddings"] / wavelen - s["low_freq_factor"]) / (
            s["high_freq_factor"] - s["low_freq_factor"])
        smoothed = (1 - smooth) * scaled / s["factor"] + smooth * scaled
        medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
        f = torch.where(medium, smoothed, scaled)
    return f


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def linear(x, w, name):
    y = x @ w[name + ".weight"].T
    return y + w[name + ".bias"] if name + ".bias" in w else y


def logits_of(w, v, ids):
    A, G, D = v["A"], v["G"], v["D"]
    freqs = torch.arange(S, dtype=torch.float64)[:, None] * inv_freq(v)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.tril(torch.ones(S, S, dtype=torch.bool))
    x = w["model.embed_tokens.weight"][ids]
    for i in range(L):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], v["eps"])
        q = linear(h, w, p + "self_attn.q_proj").view(B, S, A, D).transpose(1, 2)
        k = linear(h, w, p + "self_attn.k_proj").view(B, S, G, D).transpose(1, 2)
        val = linear(h, w, p + "self_attn.v_proj").view(B, S, G, D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, val = k.repeat_interleave(A // G, dim=1), val.repeat_interleave(A // G, dim=1)  # repeat_kv
        att = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        ctx = (att @ val).transpose(1, 2).reshape(B, S, A * D)
        x = x + linear(ctx, w, p + "self_attn.o_proj")
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], v["eps"])
        gate, up = linear(h, w, p + "mlp.gate_proj"), linear(h, w, p + "mlp.up_proj")
        x = x + linear(torch.nn.functional.silu(gate) * up, w, p + "mlp.down_proj")
    x = rms_norm(x, w["model.norm.weight"], v["eps"])
    head = w["model.embed_tokens.weight"] if v["tied"] else w["lm_head.weight"]
    return x @ head.T


TORCH = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
tokens = torch.randint(0, V, (B, S + 1), generator=g)
ref = {"tokens": tokens.tolist(), "seq": S, "micro_batch": B, "variants": {}}
for kind, v in VARIANTS.items():
    d = os.path.join(out, kind)
    os.makedirs(d, exist_ok=True)
    config = {"architectures": [v["arch"]], "model_type": v["model_type"], "num_hidden_layers": L, "hidden_size": H,
              "num_attention_heads": v["A"], "num_key_value_heads": v["G"], "intermediate_size": v["F"],
              "vocab_size": V, "max_position_embeddings": P, "hidden_act": "silu", "rms_norm_eps": v["eps"],
              "rope_theta": v["theta"], "rope_scaling": v["scaling"], "tie_word_embeddings": v["tied"],
              "initializer_range": 0.02, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
              "torch_dtype": {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[v["dtype"]]}
    if v["D"] != H // v["A"]:
        config["head_dim"] = v["D"]
    if v["model_type"] == "llama":
        config["attention_bias"] = v["all_bias"]
        config["mlp_bias"] = v["all_bias"]
    else:
        config["use_sliding_window"] = False
        config["sliding_window"] = 4096
    json.dump(config, open(os.path.join(d, "config.json"), "w"), indent=2)
    if kind == "qwen2":
        # A minimal tokenizer.json (BPE without merges: <unk>, <s>, </s> and 197 single characters) and
        # its tokenizer_config.json, so the import records a HuggingFaceTokenizer and the export copies it.
        chars = [chr(c) for c in range(0x4E00, 0x4E00 + V - 3)]
        vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
        special = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                    "normalized": False, "special": True} for t, i in (("<s>", 1), ("</s>", 2))]
        tok = {"version": "1.0", "added_tokens": special, "normalizer": None, "pre_tokenizer": None,
               "decoder": None, "model": {"type": "BPE", "vocab": vocab, "merges": [], "unk_token": "<unk>"}}
        json.dump(tok, open(os.path.join(d, "tokenizer.json"), "w"), ensure_ascii=False)
        json.dump({"bos_token": "<s>", "eos_token": "</s>"}, open(os.path.join(d, "tokenizer_config.json"), "w"))
    stored = {n: t.to(TORCH[v["dtype"]]) for n, t in weights(v).items()}
    tensors = []
    for n, t in stored.items():
        raw = t.contiguous().view(torch.int16).numpy().tobytes() if v["dtype"] == "BF16" else t.numpy().tobytes()
        tensors.append((n, v["dtype"], list(t.shape), raw))
    # Two shards, split in the middle of the tensor list, as save_pretrained's max_shard_size would.
    half = len(tensors) // 2
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    weight_map = {}
    for f, part in zip(files, (tensors[:half], tensors[half:])):
        write(os.path.join(d, f), part, {"format": "pt"})
        weight_map.update({t[0]: f for t in part})
    index = {"metadata": {"total_size": sum(len(t[3]) for t in tensors)}, "weight_map": dict(sorted(weight_map.items()))}
    json.dump(index, open(os.path.join(d, "model.safetensors.index.json"), "w"), indent=2)
    logits = logits_of({n: t.to(torch.float64) for n, t in stored.items()}, v, tokens[:, :S])
    logits.numpy().astype("<f8").tofile(os.path.join(out, kind + ".logits.f64"))
    ref["variants"][kind] = {"logits": kind + ".logits.f64", "dtype": v["dtype"], "max_abs_logit": logits.abs().max().item()}
json.dump(ref, open(os.path.join(out, "reference.json"), "w"))
