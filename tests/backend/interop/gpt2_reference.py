"""A tiny GPT2LMHeadModel checkpoint in Hugging Face's conventions and its loss, in float64 PyTorch.

  /usr/bin/python3 gpt2_reference.py OUT_DIR

Writes OUT_DIR/f32/{config.json,model.safetensors} and OUT_DIR/bf16/ (the same weights rounded to
bfloat16 by torch), with Hugging Face's names and conventions (Conv1D weights stored (in, out) and
applied as x @ W; c_attn's columns [q | k | v], each split into heads; tied wte; gelu_new; pre-LN),
and OUT_DIR/reference.json: {"tokens": (B, S+1) ids, "loss_f32": ..., "loss_bf16": ...}, the mean
next-token cross-entropy of a float64 forward written from GPT-2's definition (not from mwb's code).
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_reference import write  # noqa: E402  (the independent safetensors writer)

L, H, A, V, P, B, S = 2, 32, 4, 256, 16, 2, 12
F = 4 * H
out = sys.argv[1]
g = torch.Generator().manual_seed(3)


def rnd(*shape, std=0.2):
    return torch.randn(*shape, generator=g, dtype=torch.float64) * std


w = {"wte.weight": rnd(V, H, std=0.5), "wpe.weight": rnd(P, H, std=0.1),
     "ln_f.weight": 1 + rnd(H, std=0.1), "ln_f.bias": rnd(H, std=0.1)}
for i in range(L):
    p = f"h.{i}."
    w[p + "ln_1.weight"], w[p + "ln_1.bias"] = 1 + rnd(H, std=0.1), rnd(H, std=0.1)
    w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"] = rnd(H, 3 * H), rnd(3 * H, std=0.1)
    w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"] = rnd(H, H), rnd(H, std=0.1)
    w[p + "ln_2.weight"], w[p + "ln_2.bias"] = 1 + rnd(H, std=0.1), rnd(H, std=0.1)
    w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"] = rnd(H, F), rnd(F, std=0.1)
    w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"] = rnd(F, H), rnd(H, std=0.1)
tokens = torch.randint(0, V, (B, S + 1), generator=g)


def layer_norm(x, wt, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * wt + b


def gelu_new(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def loss_of(w):
    x = w["wte.weight"][tokens[:, :-1]] + w["wpe.weight"][:S]
    mask = torch.tril(torch.ones(S, S, dtype=torch.bool))
    for i in range(L):
        p = f"h.{i}."
        h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: x @ W + b
        q, k, v = qkv.split(H, dim=-1)                                       # columns [q | k | v]
        heads = lambda t: t.view(B, S, A, H // A).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(H // A)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        ctx = (att @ v).transpose(1, 2).reshape(B, S, H)
        x = x + ctx @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        x = x + gelu_new(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]) @ w[p + "mlp.c_proj.weight"] \
            + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"])
    logits = x @ w["wte.weight"].T  # tied
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1)).item()


config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": L, "n_embd": H, "n_head": A,
          "vocab_size": V, "n_positions": P, "n_inner": None, "activation_function": "gelu_new",
          "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
ref = {"tokens": tokens.tolist(), "seq": S, "micro_batch": B}
for kind in ["f32", "bf16"]:
    d = os.path.join(out, kind)
    os.makedirs(d, exist_ok=True)
    json.dump(config, open(os.path.join(d, "config.json"), "w"))
    dt = torch.float32 if kind == "f32" else torch.bfloat16
    stored = {n: t.to(dt) for n, t in w.items()}
    tensors = []
    for n, t in stored.items():
        raw = t.contiguous().view(torch.int16).numpy().tobytes() if kind == "bf16" else t.numpy().tobytes()
        tensors.append(("transformer." + n, "BF16" if kind == "bf16" else "F32", list(t.shape), raw))
    # lm_head.weight is tied and not saved (as save_pretrained does); the causal-mask buffer of old
    # checkpoints is saved, to be ignored.
    tensors.append(("transformer.h.0.attn.bias", "F32", [1, 1, P, P], np.tril(np.ones((P, P), np.float32)).tobytes()))
    write(os.path.join(d, "model.safetensors"), tensors, {"format": "pt"})
    ref["loss_" + kind] = loss_of({n: t.to(torch.float64) for n, t in stored.items()})
json.dump(ref, open(os.path.join(out, "reference.json"), "w"))
