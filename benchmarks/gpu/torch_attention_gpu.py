#!/usr/bin/env python3
"""PyTorch's causal scaled_dot_product_attention (bf16, flash/cuDNN kernels as PyTorch picks them) on the
shape `mwb-gpu-bench attention` times, side by side in scripts/gpu-check.sh: forward and backward
milliseconds from CUDA events after warm-up, TFLOP/s by FlashAttention's causal count (forward
2·B·A·S²·D, backward 2.5× forward), one JSON line. `--groups G` runs grouped-query attention
(enable_gqa, PyTorch >= 2.5). `--device cpu` runs a tiny shape, for testing the script."""
import argparse
import json
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--groups", type=int, default=0, help="key/value heads (0: = heads)")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    groups = a.groups or a.heads
    if a.heads % groups:
        ap.error("--groups must divide --heads")
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("no CUDA device: torch.cuda.is_available() is False")
        raise SystemExit(77)
    dtype = torch.bfloat16 if cuda else torch.float32
    B, A, G, S, D = a.batch, a.heads, groups, a.seq, a.head_dim
    if not cuda:
        S, D = min(S, 64), min(D, 32)
    gen = torch.Generator(device=a.device).manual_seed(7)

    def tensor(heads):
        return torch.randn(B, heads, S, D, device=a.device, dtype=dtype, generator=gen).requires_grad_()

    q, k, v = tensor(A), tensor(G), tensor(G)
    dout = torch.randn(B, A, S, D, device=a.device, dtype=dtype, generator=gen)
    extra = {"enable_gqa": True} if G != A else {}

    def fwd():
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch >= 2.0 (the GPU machine has 2.11)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **extra)
        # Older PyTorch (Debian's, for testing the script on the CPU): the same function, unfused.
        kk, vv = (t.repeat_interleave(A // G, dim=1) for t in (k, v))
        att = (q @ kk.transpose(-1, -2)) * D**-0.5
        mask = torch.triu(torch.ones(S, S, dtype=torch.bool, device=q.device), diagonal=1)
        return torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1) @ vv

    def timed(fn):
        if cuda:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(a.iters):
                fn()
            stop.record()
            torch.cuda.synchronize()
            return start.elapsed_time(stop) / a.iters
        t0 = time.perf_counter()
        for _ in range(a.iters):
            fn()
        return (time.perf_counter() - t0) * 1e3 / a.iters

    for _ in range(a.warmup):
        torch.autograd.grad(fwd(), (q, k, v), dout)
    if cuda:
        torch.cuda.synchronize()
    with torch.no_grad():
        fwd_ms = timed(fwd)
    out = fwd()  # one graph, its backward timed alone (retain_graph: the same one each time)
    bwd_ms = timed(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
    fwd_flops = 2.0 * B * A * S * S * D
    print(json.dumps({
        "engine": "torch", "label": "attention", "gpu": torch.cuda.get_device_name() if cuda else "cpu",
        "batch": B, "heads": A, "groups": G, "seq": S, "head_dim": D, "torch": torch.__version__,
        "kernels": ("F.scaled_dot_product_attention(is_causal=True)" if hasattr(F, "scaled_dot_product_attention")
                    else "unfused softmax(q·kᵀ)·v") + " in " + str(dtype).replace("torch.", ""),
        "iters": a.iters, "fwd_ms": fwd_ms, "bwd_ms": bwd_ms,
        "fwd_tflops": fwd_flops / (fwd_ms * 1e-3) / 1e12, "bwd_tflops": 2.5 * fwd_flops / (bwd_ms * 1e-3) / 1e12,
        "flops": "causal: forward 2·B·A·S²·D, backward 2.5× forward (FlashAttention's count)",
        "timing": ("CUDA events" if cuda else "wall clock") + " around the calls, after warm-up",
    }))


if __name__ == "__main__":
    main()
