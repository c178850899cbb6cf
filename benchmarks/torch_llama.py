#!/usr/bin/python3
"""The same Llama-family model as mwb-train's (RoPE, SwiGLU, grouped-query attention, RMSNorm, no biases,
untied output layer), trained by PyTorch (Debian's python3-torch) on random tokens in fp32, for the
side-by-side benchmark benchmarks/run_llama_benchmark.py. Dropout is the given probability on both
residual branches and the attention probabilities (0 in the benchmark, as Llama trains). AdamW with
global-norm clipping. Prints one JSON line."""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, h, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(h)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self, h, a, g, f, p):
        super().__init__()
        self.a, self.g, self.d = a, g, h // a
        self.norm1, self.norm2 = RMSNorm(h), RMSNorm(h)
        self.q = nn.Linear(h, a * self.d, bias=False)
        self.kv = nn.Linear(h, 2 * g * self.d, bias=False)
        self.proj = nn.Linear(a * self.d, h, bias=False)
        self.gate_up = nn.Linear(h, 2 * f, bias=False)
        self.down = nn.Linear(f, h, bias=False)
        self.drop_h, self.drop_a = nn.Dropout(p), nn.Dropout(p)

    def forward(self, x, mask, cos, sin):
        B, S, H = x.shape
        h = self.norm1(x)
        q = self.q(h).view(B, S, self.a, self.d).transpose(1, 2)
        k, v = self.kv(h).view(B, S, 2, self.g, self.d).permute(2, 0, 3, 1, 4)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(self.a // self.g, dim=1), v.repeat_interleave(self.a // self.g, dim=1)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.d))
        att = self.drop_a(torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1))
        x = x + self.drop_h(self.proj((att @ v).transpose(1, 2).reshape(B, S, H)))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.drop_h(self.down(F.silu(gate) * up))


class Llama(nn.Module):
    def __init__(self, layers, h, a, g, f, s, v, p):
        super().__init__()
        self.embed = nn.Embedding(v, h)
        self.drop = nn.Dropout(p)
        self.blocks = nn.ModuleList(Block(h, a, g, f, p) for _ in range(layers))
        self.norm = RMSNorm(h)
        self.out = nn.Linear(h, v, bias=False)
        d = h // a
        inv = 1.0 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
        angles = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
        emb = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", emb.cos().float())
        self.register_buffer("sin", emb.sin().float())
        self.register_buffer("mask", torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1))

    def forward(self, idx, targets):
        x = self.drop(self.embed(idx))
        for b in self.blocks:
            x = b(x, self.mask, self.cos, self.sin)
        logits = self.out(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    for name in ("layers", "hidden", "heads", "groups", "ffn", "seq", "batch"):
        ap.add_argument(f"--{name}", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True, help="padded vocabulary")
    ap.add_argument("--dropout", type=float, required=True, help="hidden and attention dropout")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    model = Llama(a.layers, a.hidden, a.heads, a.groups, a.ffn, a.seq, a.vocab, a.dropout)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    times = []
    for it in range(a.warmup + a.iters):
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if it >= a.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    t = times[len(times) // 2]
    print(json.dumps({"iteration_time_s": t, "tokens_per_sec": a.batch * a.seq / t, "loss": loss.item(),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
