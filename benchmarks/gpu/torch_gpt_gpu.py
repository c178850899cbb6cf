#!/usr/bin/env python3
"""The same GPT as mwb-gpu-bench (pre-LN GPT-2: learned positions, tied embeddings, tanh GELU, AdamW),
trained by PyTorch on random tokens: the side-by-side reference of scripts/gpu-check.sh. On CUDA it
runs as a PyTorch user would for speed: bf16 autocast, fused scaled_dot_product_attention (flash),
fused AdamW; --compile adds torch.compile. Prints one JSON line (tokens/s, TFLOP/s, MFU against the
measured bf16 matmul peak, peak memory). `--device cpu` runs a tiny model for testing the script."""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def causal_attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):  # PyTorch >= 2.0: fused (flash) kernels
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    s = q.shape[-2]  # older PyTorch (the CPU test here): the same function, unfused
    att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool, device=q.device), diagonal=1)
    return torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1) @ v


class Block(nn.Module):
    def __init__(self, h, a):
        super().__init__()
        self.a = a
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):
        B, S, H = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, S, self.a, 3, H // self.a).permute(3, 0, 2, 1, 4)
        y = causal_attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(B, S, H))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, h, a, s, v):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(v, h), nn.Embedding(s, h)
        self.blocks = nn.ModuleList(Block(h, a) for _ in range(layers))
        self.lnf = nn.LayerNorm(h)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe.weight[: idx.shape[1]]
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


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


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (slow first iteration)")
    ap.add_argument("--peak-tflops", type=float, default=0, help="bf16 peak for MFU; 0 measures it (CUDA)")
    ap.add_argument("--label", default="gpt")
    args = ap.parse_args()
    if args.hidden % args.heads:
        ap.error("--hidden must be a multiple of --heads")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: torch.cuda.is_available() is False")
        raise SystemExit(77)

    dev = torch.device(args.device)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    peak = args.peak_tflops or (bf16_peak_tflops(dev) if args.device == "cuda" else 0.0)
    model = GPT(args.layers, args.hidden, args.heads, args.seq, args.vocab).to(dev)
    for p in model.parameters():  # GPT-2's N(0, 0.02) init, as mwb's (a sane loss, same work)
        if p.dim() == 2:
            nn.init.normal_(p, 0.0, 0.02)
    fused = {"fused": True} if args.device == "cuda" else {}  # (old CPU-only torch builds lack the argument)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused)
    step_model = torch.compile(model) if args.compile else model
    amp = torch.autocast(device_type=args.device, dtype=torch.bfloat16)

    def step():
        tok = torch.randint(0, args.vocab, (args.micro_batch, args.seq + 1), device=dev)
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
    T, L, h, s, V = args.micro_batch * args.seq, args.layers, args.hidden, args.seq, args.vocab
    flops = 3.0 * T * (L * (8 * h * h + 4 * h * 4 * h + 4 * s * h) + 2 * h * V)  # as mwb-gpu-bench
    out = {
        "engine": "pytorch" + (" (compiled)" if args.compile else ""),
        "label": args.label,
        "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "layers": L, "hidden": h, "heads": args.heads, "seq": s, "micro_batch": args.micro_batch, "vocab": V,
        "params": sum(p.numel() for p in model.parameters()),
        "precision": "bf16 autocast, fp32 master weights, SDPA attention" if args.device == "cuda" else "bf16 autocast (cpu)",
        "iters": args.iters,
        "iter_seconds": dt,
        "tokens_per_s": T / dt,
        "model_tflops": flops / dt / 1e12,
        "peak_bf16_tflops": peak,
        "mfu": flops / dt / 1e12 / peak if peak else None,
        "loss": float(loss),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated() if args.device == "cuda" else None,
        "reserved_bytes": torch.cuda.max_memory_reserved() if args.device == "cuda" else None,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
