#!/usr/bin/python3
"""Builds the PyTorch reference fixtures of the Llama-family block for tests/backend/test_gpt_reference.cpp.

An independent Llama written with plain torch ops from the published architecture (Touvron et al. 2023;
Meta's and Hugging Face's reference code conventions): separate q/k/v projections with G key/value
heads repeated for their A/G query heads, rotary position embedding on the first rotary_percent of each
head by the rotate-half pairing (x·cos + rotate_half(x)·sin with the frequency table repeated over both
halves; with rotary_interleaved, Megatron's --rotary-interleaved pairs (2i, 2i+1) as complex numbers, the
form of Meta's original Llama code), Llama 3.1's frequency scaling, SwiGLU MLP down(silu(gate(x))·up(x)), RMSNorm, no biases (or a
QKV bias as Qwen2), untied output layer. Run in float64: the loss, the gradient of every parameter and
the parameters after one torch.optim.AdamW step with global-norm clipping.

Only when writing the fixture are the tensors fused into Megatron-core's layout, which the C++ model
uses: linear_qkv rows per key/value group [q heads of the group | k | v], linear_fc1 rows [gate | up].
Run with Debian's python3-torch:
    /usr/bin/python3 tests/reference/make_llama_reference.py tests/fixtures
"""
import json
import math
import sys

import torch

from make_gpt_reference import encode


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def inv_frequencies(cfg):
    """1 / base^(2i/R) for i < R/2, then Llama 3.1's scaling (Hugging Face's "llama3" rope type)."""
    R = rotary_dim(cfg)
    inv = 1.0 / cfg["rotary_base"] ** (torch.arange(0, R, 2, dtype=torch.float64) / R)
    if not cfg["use_rope_scaling"]:
        return inv
    factor, low, high, old = cfg["rope_scaling_factor"], 1.0, 4.0, 8192.0
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return torch.where(medium, smoothed, scaled)


def rotary_dim(cfg):
    return int(cfg["kv_channels"] * cfg["rotary_percent"])


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin, R):
    """x (B, heads, S, D): the first R dims rotated, the rest passed through."""
    rot, rest = x[..., :R], x[..., R:]
    return torch.cat((rot * cos + rotate_half(rot) * sin, rest), dim=-1)


def apply_rope_interleaved(x, angles, R):
    """Megatron's --rotary-interleaved (GPT-J's and Meta's original Llama code's pairing): dims (2i, 2i+1)
    of the first R form the complex number x_2i + j·x_2i+1, multiplied by e^(j·angle_i)."""
    rot, rest = x[..., :R], x[..., R:]
    pairs = torch.view_as_complex(rot.reshape(*rot.shape[:-1], R // 2, 2).contiguous())
    rotated = torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2)
    return torch.cat((rotated, rest), dim=-1)


def make_params(cfg, gen):
    L, H, F, V = cfg["num_layers"], cfg["hidden_size"], cfg["ffn_hidden_size"], cfg["padded_vocab"]
    A, G, D = cfg["num_attention_heads"], cfg["num_query_groups"], cfg["kv_channels"]
    p = {}

    def rnd(*shape, std=0.02):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * std).float().double()

    p["embed"] = rnd(V, H)
    for l in range(L):
        # Norm weights are random too, so their gradients are checked in a general position.
        p[f"{l}.attn_norm"] = 1.0 + rnd(H, std=0.1)
        p[f"{l}.q"] = rnd(A * D, H, std=0.2)
        p[f"{l}.k"] = rnd(G * D, H, std=0.2)
        p[f"{l}.v"] = rnd(G * D, H, std=0.2)
        if cfg["add_qkv_bias"]:
            p[f"{l}.q_bias"] = rnd(A * D, std=0.1)
            p[f"{l}.k_bias"] = rnd(G * D, std=0.1)
            p[f"{l}.v_bias"] = rnd(G * D, std=0.1)
        p[f"{l}.o"] = rnd(H, A * D, std=0.2)
        p[f"{l}.mlp_norm"] = 1.0 + rnd(H, std=0.1)
        p[f"{l}.gate"] = rnd(F, H, std=0.2)
        p[f"{l}.up"] = rnd(F, H, std=0.2)
        p[f"{l}.down"] = rnd(H, F, std=0.2)
    p["final_norm"] = 1.0 + rnd(H, std=0.1)
    p["lm_head"] = rnd(V, H, std=0.2)
    return {k: v.requires_grad_(True) for k, v in p.items()}


def forward(cfg, p, tokens):
    """tokens: (B, S+1) int64. Returns the mean cross-entropy over all B·S positions."""
    L, A, G, D, eps = cfg["num_layers"], cfg["num_attention_heads"], cfg["num_query_groups"], cfg["kv_channels"], \
        cfg["layernorm_epsilon"]
    R = rotary_dim(cfg)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    B, S = inputs.shape
    angles = torch.arange(S, dtype=torch.float64)[:, None] * inv_frequencies(cfg)[None, :]  # (S, R/2)
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)
    x = p["embed"][inputs]  # (B, S, H): no position table
    for l in range(L):
        h = rms_norm(x, p[f"{l}.attn_norm"], eps)
        q, k, v = h @ p[f"{l}.q"].T, h @ p[f"{l}.k"].T, h @ p[f"{l}.v"].T
        if cfg["add_qkv_bias"]:
            q, k, v = q + p[f"{l}.q_bias"], k + p[f"{l}.k_bias"], v + p[f"{l}.v_bias"]
        q = q.view(B, S, A, D).transpose(1, 2)
        k = k.view(B, S, G, D).transpose(1, 2)
        v = v.view(B, S, G, D).transpose(1, 2)
        if cfg.get("rotary_interleaved", False):
            q, k = apply_rope_interleaved(q, angles, R), apply_rope_interleaved(k, angles, R)
        else:
            q, k = apply_rope(q, cos, sin, R), apply_rope(k, cos, sin, R)
        k = k.repeat_interleave(A // G, dim=1)  # repeat_kv: query head j reads key/value head j // (A/G)
        v = v.repeat_interleave(A // G, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        ctx = (probs @ v).transpose(1, 2).reshape(B, S, A * D)
        x = x + ctx @ p[f"{l}.o"].T
        h = rms_norm(x, p[f"{l}.mlp_norm"], eps)
        x = x + (torch.nn.functional.silu(h @ p[f"{l}.gate"].T) * (h @ p[f"{l}.up"].T)) @ p[f"{l}.down"].T
    x = rms_norm(x, p["final_norm"], eps)
    logits = x @ p["lm_head"].T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def megatron_tensors(cfg, t):
    """The same values under Megatron-core's names and fused layouts (t: a dict like make_params')."""
    A, G, D = cfg["num_attention_heads"], cfg["num_query_groups"], cfg["kv_channels"]
    H = cfg["hidden_size"]

    def qkv(q, k, v, cols):
        # Per group g: its A/G query heads, then k_g, then v_g.
        q = q.reshape(G, A // G * D, *cols)
        return torch.cat((q, k.reshape(G, D, *cols), v.reshape(G, D, *cols)), dim=1).reshape(-1, *cols)

    m = {"embedding.word_embeddings.weight": t["embed"]}
    for l in range(cfg["num_layers"]):
        pre = f"decoder.layers.{l}."
        m[pre + "input_layernorm.weight"] = t[f"{l}.attn_norm"]
        m[pre + "self_attention.linear_qkv.weight"] = qkv(t[f"{l}.q"], t[f"{l}.k"], t[f"{l}.v"], (H,))
        if cfg["add_qkv_bias"]:
            m[pre + "self_attention.linear_qkv.bias"] = qkv(t[f"{l}.q_bias"], t[f"{l}.k_bias"], t[f"{l}.v_bias"], ())
        m[pre + "self_attention.linear_proj.weight"] = t[f"{l}.o"]
        m[pre + "pre_mlp_layernorm.weight"] = t[f"{l}.mlp_norm"]
        m[pre + "mlp.linear_fc1.weight"] = torch.cat((t[f"{l}.gate"], t[f"{l}.up"]), dim=0)
        m[pre + "mlp.linear_fc2.weight"] = t[f"{l}.down"]
    m["decoder.final_layernorm.weight"] = t["final_norm"]
    m["output_layer.weight"] = t["lm_head"]
    return m


def make_case(name, cfg, seed):
    gen = torch.Generator().manual_seed(seed)
    p = make_params(cfg, gen)
    initial = {k: v.detach().clone() for k, v in p.items()}
    B, S, V = cfg["micro_batch_size"], cfg["seq_length"], cfg["vocab_size"]
    tokens = torch.randint(0, V, (cfg["global_batch_size"], S + 1), generator=gen)
    M = cfg["global_batch_size"] // B
    losses = [forward(cfg, p, tokens[m * B:(m + 1) * B]) for m in range(M)]  # Megatron: mean of micro-batches
    loss = sum(losses) / M
    loss.backward()
    grads = {k: v.grad.detach().clone() for k, v in p.items()}
    total_norm = torch.sqrt(sum((g ** 2).sum() for g in grads.values()))
    no_decay_names = [k for k in p if k.endswith("norm") or k.endswith("_bias")]
    opt = torch.optim.AdamW([{"params": [v for k, v in p.items() if k not in no_decay_names],
                              "weight_decay": cfg["weight_decay"]},
                             {"params": [p[k] for k in no_decay_names], "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(cfg["adam_beta1"], cfg["adam_beta2"]), eps=cfg["adam_eps"])
    torch.nn.utils.clip_grad_norm_(list(p.values()), cfg["clip_grad"])
    opt.step()
    after = {k: v.detach() for k, v in p.items()}
    mi, mg, ma = megatron_tensors(cfg, initial), megatron_tensors(cfg, grads), megatron_tensors(cfg, after)
    tensors = [{"name": k, "shape": list(v.shape), "initial_f32": encode(v, torch.float32),
                "grad_f64": encode(mg[k], torch.float64), "after_step_f64": encode(ma[k], torch.float64)}
               for k, v in mi.items()]
    return {"name": name, "config": cfg, "tokens": tokens.flatten().tolist(), "loss": loss.item(),
            "grad_norm": total_norm.item(), "tensors": tensors,
            "generator": f"tests/reference/make_llama_reference.py (torch {torch.__version__}, float64)"}


def main(out_dir):
    torch.set_default_dtype(torch.float64)
    base = {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "num_query_groups": 2, "kv_channels": 8,
            "ffn_hidden_size": 48, "swiglu": True, "seq_length": 12, "vocab_size": 40, "padded_vocab": 40,
            "micro_batch_size": 2, "global_batch_size": 2, "normalization": "RMSNorm", "layernorm_epsilon": 1e-5,
            "untie_embeddings_and_output_weights": True, "position_embedding_type": "rope", "add_bias_linear": False,
            "add_qkv_bias": False,
            # Base 500000 (Llama 3's) puts the 4 frequencies of an 8-dim head in all three bands of the
            # scaling: wavelengths 6, 167 (kept), 4443 (interpolated) and 118 000 (divided by the factor).
            "rotary_base": 500000, "rotary_percent": 1.0, "use_rope_scaling": True, "rope_scaling_factor": 8.0,
            # adam_eps large on purpose, as in make_gpt_reference.py.
            "lr": 1e-2, "adam_beta1": 0.9, "adam_beta2": 0.95, "adam_eps": 1e-3, "weight_decay": 0.1,
            "clip_grad": 0.5}
    cases = [
        ("gqa_rope_scaled", dict(base), 3),
        # Multi-query attention with a QKV bias (Qwen2), head dim 12 != hidden/heads, half of each head
        # rotated, no scaling, and gradient accumulation over 2 micro-batches.
        ("mqa_qkv_bias", dict(base, num_query_groups=1, add_qkv_bias=True, kv_channels=12, rotary_percent=0.5,
                              rotary_base=10000, use_rope_scaling=False, global_batch_size=4, seq_length=10), 4),
        # --rotary-interleaved: pairs (2i, 2i+1) instead of (i, i + R/2), on 3/4 of a 16-dim head (head dim
        # 16 != hidden/heads), scaled frequencies, GQA.
        ("gqa_rope_interleaved", dict(base, rotary_interleaved=True, kv_channels=16, rotary_percent=0.75), 5),
    ]
    for name, cfg, seed in cases:
        with open(f"{out_dir}/llama_reference_{name}.json", "w") as f:
            json.dump(make_case(name, cfg, seed), f)
        print(f"wrote {out_dir}/llama_reference_{name}.json")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures")
