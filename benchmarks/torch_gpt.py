#!/usr/bin/python3
"""The same GPT as mwb-train, trained by PyTorch (Debian's python3-torch) on random tokens, for the
side-by-side benchmark in scripts/bench.sh. Pre-LN GPT-2 architecture, tied embeddings, tanh GELU,
hidden/attention dropout, AdamW with global-norm clipping, fp32. Prints one JSON line."""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, a, p_hidden, p_attn):
        super().__init__()
        self.a = a
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
        self.drop_h, self.drop_a = nn.Dropout(p_hidden), nn.Dropout(p_attn)

    def forward(self, x, mask):
        B, S, H = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, S, self.a, 3, H // self.a).permute(3, 0, 2, 1, 4)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(H // self.a))
        att = self.drop_a(torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1))
        x = x + self.drop_h(self.proj((att @ v).transpose(1, 2).reshape(B, S, H)))
        return x + self.drop_h(self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh")))


class GPT(nn.Module):
    def __init__(self, layers, h, a, s, v, p_hidden, p_attn):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(v, h), nn.Embedding(s, h)
        self.drop = nn.Dropout(p_hidden)
        self.blocks = nn.ModuleList(Block(h, a, p_hidden, p_attn) for _ in range(layers))
        self.lnf = nn.LayerNorm(h)
        self.register_buffer("mask", torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1))

    def forward(self, idx, targets):
        x = self.drop(self.wte(idx) + self.wpe.weight[: idx.shape[1]])
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True, help="padded vocabulary")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    model = GPT(a.layers, a.hidden, a.heads, a.seq, a.vocab, 0.1, 0.1)
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
    t = sum(times) / len(times)
    print(json.dumps({"iteration_time_s": t, "tokens_per_sec": a.batch * a.seq / t, "loss": loss.item(),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
