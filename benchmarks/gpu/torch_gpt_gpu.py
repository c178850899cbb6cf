#!/usr/bin/env python3
"""The same model as mwb-gpu-bench, trained by PyTorch on random tokens: the side-by-side reference of
scripts/gpu-check.sh. The model is given as mwb-train's (Megatron-LM's) flags, or --preset NAME
(resources/presets/NAME.json, the same file mwb-gpu-bench reads) under them: a pre-LN GPT-2 (learned
positions, LayerNorm, biases, tanh GELU, tied embeddings) or a Llama-style model (--position-embedding-type
rope: rotate-half RoPE; --swiglu; --group-query-attention --num-query-groups G; --normalization RMSNorm;
--disable-bias-linear; --untie-embeddings-and-output-weights). Llama 3's RoPE frequency scaling
(use_rope_scaling) only changes the angle table, not the work, and is left out. On CUDA it runs as a
PyTorch user would for speed: bf16 autocast, fused scaled_dot_product_attention (flash; enable_gqa for
grouped-query attention), fused AdamW; --compile adds torch.compile. Prints one JSON line (tokens/s,
model TFLOP/s by backend/telemetry/flops.h's count, MFU against the catalogue's H200 peak and against
the bf16 matmul peak measured in the same process, peak memory). `--device cpu` runs a tiny model for
testing the script (tests/benchmarks: params and FLOPs against `mwb-gpu-bench --describe`)."""
import argparse
import contextlib
import inspect
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
RESOURCES = os.environ.get("MWB_RESOURCES_DIR") or os.path.join(HERE, "..", "..", "resources")
SDPA = getattr(F, "scaled_dot_product_attention", None)  # PyTorch >= 2.0
SDPA_GQA = SDPA is not None and "enable_gqa" in inspect.signature(SDPA).parameters  # PyTorch >= 2.5


def causal_attention(q, k, v):
    """q (B, a, S, d), k and v (B, G, S, d) with G dividing a: query head j reads group j // (a / G)."""
    if SDPA is not None and (SDPA_GQA or k.shape[1] == q.shape[1]):  # fused (flash) kernels
        extra = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
        return SDPA(q, k, v, is_causal=True, **extra)
    if k.shape[1] != q.shape[1]:  # repeat_kv, as Hugging Face's Llama does without enable_gqa
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    if SDPA is not None:
        return SDPA(q, k, v, is_causal=True)
    s = q.shape[-2]  # older PyTorch (the CPU test here): the same function, unfused
    att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool, device=q.device), diagonal=1)
    return torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1) @ v


class RMSNorm(nn.Module):
    def __init__(self, h, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(h))

    def forward(self, x):
        xf = x.float() if x.element_size() < 4 else x  # fp32 statistics for 16-bit inputs
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_tables(s, rotary_dim, base, device):
    """cos and sin (S, rotary_dim) for rotate-half RoPE: frequency i for dims i and i + rotary_dim / 2."""
    dt = torch.get_default_dtype()  # fp32 (float64 in the CPU test)
    inv = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, device=device, dtype=dt) / rotary_dim))
    ang = torch.outer(torch.arange(s, device=device, dtype=dt), inv)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):
    """Rotates the first cos.shape[-1] dims of x (B, heads, S, d) in rotate-half pairs."""
    r = cos.shape[-1]
    xr, rest = x[..., :r], x[..., r:]
    x1, x2 = xr[..., : r // 2], xr[..., r // 2 :]
    rotated = torch.cat([-x2, x1], dim=-1)
    return torch.cat([(xr * cos + rotated * sin).type_as(x), rest], dim=-1)


class Block(nn.Module):
    def __init__(self, m):
        super().__init__()
        h, self.a, self.g, self.d = m["hidden"], m["heads"], m["groups"], m["head_dim"]
        norm = (lambda: RMSNorm(h, m["eps"])) if m["rmsnorm"] else (lambda: nn.LayerNorm(h, eps=m["eps"]))
        self.ln1, self.ln2 = norm(), norm()
        bias = m["bias"]
        self.qkv = nn.Linear(h, (self.a + 2 * self.g) * self.d, bias=bias or m["qkv_bias"])
        self.proj = nn.Linear(self.a * self.d, h, bias=bias)
        self.swiglu = m["swiglu"]
        f = m["ffn"]
        self.fc1 = nn.Linear(h, 2 * f if self.swiglu else f, bias=bias)
        self.fc2 = nn.Linear(f, h, bias=bias)

    def forward(self, x, rope):
        B, S, _ = x.shape
        qkv = self.qkv(self.ln1(x))
        q, k, v = qkv.split([self.a * self.d, self.g * self.d, self.g * self.d], dim=-1)
        q = q.view(B, S, self.a, self.d).transpose(1, 2)
        k = k.view(B, S, self.g, self.d).transpose(1, 2)
        v = v.view(B, S, self.g, self.d).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        y = causal_attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(B, S, self.a * self.d))
        u = self.fc1(self.ln2(x))
        if self.swiglu:
            gate, up = u.chunk(2, dim=-1)
            u = F.silu(gate) * up
        else:
            u = F.gelu(u, approximate="tanh")
        return x + self.fc2(u)


class GPT(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m
        self.wte = nn.Embedding(m["vocab"], m["hidden"])
        self.wpe = None if m["rope"] else nn.Embedding(m["positions"], m["hidden"])
        self.blocks = nn.ModuleList(Block(m) for _ in range(m["layers"]))
        self.lnf = RMSNorm(m["hidden"], m["eps"]) if m["rmsnorm"] else nn.LayerNorm(m["hidden"], eps=m["eps"])
        self.head = None if m["tied"] else nn.Linear(m["hidden"], m["vocab"], bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx)
        rope = None
        if self.wpe is not None:
            x = x + self.wpe.weight[: idx.shape[1]]
        else:
            rope = rope_tables(idx.shape[1], self.m["rotary_dim"], self.m["rotary_base"], idx.device)
        for b in self.blocks:
            x = b(x, rope)
        x = self.lnf(x)
        logits = x @ self.wte.weight.T if self.head is None else self.head(x)
        logits = logits.float() if logits.element_size() < 4 else logits  # the loss in fp32 (or float64)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def model_flops_per_iter(m, mfu_attention="causal"):
    """backend/telemetry/flops.h: Narayanan et al. 2021 eq. 3 as Megatron-LM counts grouped-query
    attention and SwiGLU; 3 × tokens × [L·layer_fwd + 2h·V], attention core c·4·s·a·d (c = 1/2 causal)."""
    h, a, G, d, f, s = m["hidden"], m["heads"], m["groups"], m["head_dim"], m["ffn"], m["seq"]
    k = 3 if m["swiglu"] else 2
    c = 0.5 if mfu_attention == "causal" else 1.0
    layer = 2 * h * (a + 2 * G) * d + 2 * a * d * h + 2 * k * h * f + c * 4 * s * a * d
    return 3.0 * m["micro_batch"] * s * (m["layers"] * layer + 2 * h * m["vocab"])


def h200_peak_tflops():
    """The catalogue's dense 16-bit peak of the H200 (resources/gpus.json), MFU's usual yardstick."""
    with open(os.path.join(RESOURCES, "gpus.json")) as f:
        cat = json.load(f)
    devices = cat["devices"] if isinstance(cat, dict) else cat
    return next(x["peak_flops_16bit"] for x in devices if x["name"] == "H200") / 1e12


def bf16_peak_tflops(device):
    """8192³ bf16 matmul on random data: mean of ten after three warm-ups (as mwb-gpu-bench)."""
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 / ((time.perf_counter() - t0) / 10) / 1e12


# The configuration fields read (resources/presets/*.json names) and their Megatron-LM defaults; a flag
# --x-y sets field x_y. backend/config/validate.cpp's resolve() fills the same derived defaults.
FIELDS = {
    "num_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "group_query_attention": False,
    "num_query_groups": 1, "kv_channels": 0, "ffn_hidden_size": 0, "swiglu": False, "normalization": "LayerNorm",
    "layernorm_epsilon": 1e-5, "add_bias_linear": True, "add_qkv_bias": False, "position_embedding_type": "learned_absolute",
    "rotary_base": 10000, "rotary_percent": 1.0, "seq_length": 1024, "max_position_embeddings": 0,
    "vocab_size": 50304, "make_vocab_size_divisible_by": 128, "untie_embeddings_and_output_weights": False,
    "micro_batch_size": 8, "bf16": False,
}


def resolve(c):
    """The model's shape from the configuration fields, as validate.cpp's resolve() and gpt_dims.cpp do."""
    h, a = c["hidden_size"], c["num_attention_heads"]
    d = c["kv_channels"] or h // a
    f = c["ffn_hidden_size"] or ((8 * h // 3) // 64 * 64 if c["swiglu"] else 4 * h)
    div = c["make_vocab_size_divisible_by"]
    rope = c["position_embedding_type"] == "rope"
    return {
        "layers": c["num_layers"], "hidden": h, "heads": a, "head_dim": d, "ffn": f,
        "groups": c["num_query_groups"] if c["group_query_attention"] else a,
        "swiglu": c["swiglu"], "rmsnorm": c["normalization"] == "RMSNorm", "eps": c["layernorm_epsilon"],
        "bias": c["add_bias_linear"], "qkv_bias": c["add_qkv_bias"], "rope": rope,
        "rotary_dim": int(d * c["rotary_percent"]), "rotary_base": float(c["rotary_base"]),
        "seq": c["seq_length"], "positions": c["max_position_embeddings"] or c["seq_length"],
        "vocab": -(-c["vocab_size"] // div) * div, "tied": not c["untie_embeddings_and_output_weights"],
        "micro_batch": c["micro_batch_size"],
    }


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preset", help="resources/presets/NAME.json under the flags")
    for name, default in FIELDS.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            ap.add_argument(flag, dest=name, action="store_true", default=None)
        else:
            ap.add_argument(flag, dest=name, type=type(default), default=None)
    ap.add_argument("--disable-bias-linear", dest="add_bias_linear", action="store_false", default=None)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (slow first iteration)")
    ap.add_argument("--peak-tflops", type=float, default=0, help="bf16 peak for MFU; 0 measures it (CUDA)")
    ap.add_argument("--label", default="gpt")
    ap.add_argument("--describe", action="store_true", help="print shape, parameters and FLOPs as JSON and exit")
    args = ap.parse_args()
    c = dict(FIELDS)
    if args.preset:
        path = args.preset if args.preset.endswith(".json") else os.path.join(RESOURCES, "presets", args.preset + ".json")
        with open(path) as f:
            c.update({k: v for k, v in json.load(f).items() if k in FIELDS})
    c.update({k: getattr(args, k) for k in FIELDS if getattr(args, k) is not None})
    if c["hidden_size"] % c["num_attention_heads"] and not c["kv_channels"]:
        ap.error("--hidden-size must be a multiple of --num-attention-heads (or set --kv-channels)")
    m = resolve(c)
    if m["heads"] % m["groups"]:
        ap.error("--num-query-groups must divide --num-attention-heads")
    return args, m


def main():
    args, m = parse_args()
    dev = torch.device(args.device)
    flops = model_flops_per_iter(m)
    if args.describe:
        params = None
        # Counted on the real modules: built on the meta device (no memory) where PyTorch has it (2.0+),
        # else only when small (older PyTorch would allocate and initialise every weight on the CPU).
        if hasattr(torch.device, "__enter__") or m["layers"] * 12 * m["hidden"] ** 2 + m["vocab"] * m["hidden"] < 5e7:
            with built_on(torch.device("meta")):
                params = sum(p.numel() for p in GPT(m).parameters())
        print(json.dumps({**shape_json(m), "params": params, "model_flops_per_iter": flops}))
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: torch.cuda.is_available() is False")
        raise SystemExit(77)

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    peak = args.peak_tflops or (bf16_peak_tflops(dev) if args.device == "cuda" else 0.0)
    # Built on the device itself where PyTorch can (2.0+): a 1B model's CPU init would take seconds.
    with built_on(dev):
        model = GPT(m).to(dev)
    for p in model.parameters():  # GPT-2's N(0, 0.02) init, as mwb's (a sane loss, same work)
        if p.dim() == 2:
            nn.init.normal_(p, 0.0, 0.02)
    fused = {"fused": True} if args.device == "cuda" else {}  # (old CPU-only torch builds lack the argument)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused)
    step_model = torch.compile(model) if args.compile else model
    amp = torch.autocast(device_type=args.device, dtype=torch.bfloat16)

    def step():
        tok = torch.randint(0, m["vocab"], (m["micro_batch"], m["seq"] + 1), device=dev)
        with amp:
            loss = step_model(tok[:, :-1], tok[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        step()
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        loss = step()
    if args.device == "cuda":
        torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / args.iters
    achieved = flops / dt / 1e12
    h200 = h200_peak_tflops()
    out = {
        "engine": "pytorch" + (" (compiled)" if args.compile else ""),
        "label": args.label,
        "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        **shape_json(m),
        "params": sum(p.numel() for p in model.parameters()),
        "model_flops_per_iter": flops,
        "precision": "bf16 autocast, fp32 master weights, SDPA attention" if args.device == "cuda" else "bf16 autocast (cpu)",
        "iters": args.iters,
        "iter_seconds": dt,
        "tokens_per_s": m["micro_batch"] * m["seq"] / dt,
        "model_tflops": achieved,
        "peak_bf16_tflops": peak,
        "mfu": achieved / peak if peak else None,
        "h200_peak_tflops": h200,
        "mfu_h200": achieved / h200,
        "loss": float(loss),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated() if args.device == "cuda" else None,
        "reserved_bytes": torch.cuda.max_memory_reserved() if args.device == "cuda" else None,
    }
    print(json.dumps(out))


def shape_json(m):
    return {"layers": m["layers"], "hidden": m["hidden"], "heads": m["heads"], "groups": m["groups"],
            "head_dim": m["head_dim"], "ffn": m["ffn"], "seq": m["seq"], "micro_batch": m["micro_batch"],
            "vocab": m["vocab"], "swiglu": m["swiglu"], "rmsnorm": m["rmsnorm"], "rope": m["rope"],
            "linear_bias": m["bias"], "tied_output": m["tied"]}


def built_on(device):
    """Modules created inside are created on `device` (PyTorch 2.0+); older PyTorch builds them on the CPU."""
    return device if hasattr(torch.device, "__enter__") else contextlib.nullcontext()


if __name__ == "__main__":
    main()
