#!/usr/bin/python3
"""The same GPT as mwb-train, trained by PyTorch (Debian's python3-torch) on random tokens, for the
side-by-side benchmark in scripts/bench.sh. Pre-LN GPT-2 architecture, tied embeddings, tanh GELU,
hidden/attention dropout, AdamW with global-norm clipping, fp32; every option from
benchmarks/bench_model.py, as mwb-train gets them. Prints one JSON line."""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


from bench_model import model as bench_model, padded_vocab


class Block(nn.Module):
    def __init__(self, h, a, ffn, eps, p_hidden, p_attn):
        super().__init__()
        self.a = a
        self.ln1, self.ln2 = nn.LayerNorm(h, eps=eps), nn.LayerNorm(h, eps=eps)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, ffn), nn.Linear(ffn, h)
        self.drop_h, self.drop_a = nn.Dropout(p_hidden), nn.Dropout(p_attn)

    def forward(self, x, mask):
        B, S, H = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, S, self.a, 3, H // self.a).permute(3, 0, 2, 1, 4)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(H // self.a))
        att = self.drop_a(torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1))
        x = x + self.drop_h(self.proj((att @ v).transpose(1, 2).reshape(B, S, H)))
        return x + self.drop_h(self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh")))


class GPT(nn.Module):
    """Every option from the shared description (benchmarks/bench_model.py), Megatron-LM's names."""

    def __init__(self, m):
        super().__init__()
        h, a, s, v = m["hidden_size"], m["num_attention_heads"], m["seq_length"], padded_vocab(m)
        assert not m["untie_embeddings_and_output_weights"]
        self.wte, self.wpe = nn.Embedding(v, h), nn.Embedding(m["max_position_embeddings"], h)
        self.drop = nn.Dropout(m["hidden_dropout"])
        self.blocks = nn.ModuleList(Block(h, a, m["ffn_hidden_size"], m["layernorm_epsilon"], m["hidden_dropout"],
                                          m["attention_dropout"]) for _ in range(m["num_layers"]))
        self.lnf = nn.LayerNorm(h, eps=m["layernorm_epsilon"])
        self.register_buffer("mask", torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1))
        std = m["init_method_std"]  # Megatron-LM's init: normal(std), output projections std/sqrt(2L), biases 0
        for name, p in self.named_parameters():
            if p.dim() == 2:
                scaled = name.endswith("proj.weight") or name.endswith("fc2.weight")
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * m["num_layers"]) if scaled else std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        x = self.drop(self.wte(idx) + self.wpe.weight[: idx.shape[1]])
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="a name of bench_model.SHAPES, e.g. 'config S'")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    m = bench_model(a.model)
    torch.manual_seed(m["seed"])
    model = GPT(m)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": m["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=m["lr"], betas=(m["adam_beta1"], m["adam_beta2"]), eps=m["adam_eps"])
    assert m["lr_decay_style"] == "constant" and m["lr_warmup_iters"] == 0  # the lr stays at m["lr"]
    batch, seq = m["global_batch_size"], m["seq_length"]
    times = []
    for it in range(a.warmup + a.iters):
        tokens = torch.randint(0, m["vocab_size"], (batch, seq + 1))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), m["clip_grad"])
        opt.step()
        if it >= a.warmup:
            times.append(time.perf_counter() - t0)
    t = sum(times) / len(times)
    print(json.dumps({"iteration_time_s": t, "tokens_per_sec": batch * seq / t, "loss": loss.item(),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
