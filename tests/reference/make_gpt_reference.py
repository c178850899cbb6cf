#!/usr/bin/python3
"""Builds the PyTorch reference fixtures for tests/backend/test_gpt_reference.cpp.

An independent GPT written with plain torch ops (Megatron-core parameter names and the per-head
[q|k|v] layout of linear_qkv), run in float64: the loss of one batch, the gradient of every
parameter, and the parameters after one torch.optim.AdamW step with global-norm clipping. The C++
test loads the same initial weights and compares. Run with Debian's python3-torch:
    /usr/bin/python3 tests/reference/make_gpt_reference.py tests/fixtures
"""
import base64
import json
import math
import sys

import torch


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def norm(x, w, b, kind, eps):
    """b is None for RMSNorm."""
    if kind == "RMSNorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


def make_params(cfg, gen):
    L, H, F, V, P = cfg["num_layers"], cfg["hidden_size"], cfg["ffn_hidden_size"], cfg["padded_vocab"], cfg["seq_length"]
    p = {}

    def rnd(*shape, std=0.02):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * std).float().double()

    p["embedding.word_embeddings.weight"] = rnd(V, H)
    p["embedding.position_embeddings.weight"] = rnd(P, H)
    for l in range(L):
        pre = f"decoder.layers.{l}."
        # Norm weights and biases are random too, so their gradients are checked in a general position.
        p[pre + "input_layernorm.weight"] = 1.0 + rnd(H, std=0.1)
        p[pre + "input_layernorm.bias"] = rnd(H, std=0.1)
        p[pre + "self_attention.linear_qkv.weight"] = rnd(3 * H, H, std=0.2)
        p[pre + "self_attention.linear_qkv.bias"] = rnd(3 * H, std=0.1)
        p[pre + "self_attention.linear_proj.weight"] = rnd(H, H, std=0.2)
        p[pre + "self_attention.linear_proj.bias"] = rnd(H, std=0.1)
        p[pre + "pre_mlp_layernorm.weight"] = 1.0 + rnd(H, std=0.1)
        p[pre + "pre_mlp_layernorm.bias"] = rnd(H, std=0.1)
        p[pre + "mlp.linear_fc1.weight"] = rnd(F, H, std=0.2)
        p[pre + "mlp.linear_fc1.bias"] = rnd(F, std=0.1)
        p[pre + "mlp.linear_fc2.weight"] = rnd(H, F, std=0.2)
        p[pre + "mlp.linear_fc2.bias"] = rnd(H, std=0.1)
    p["decoder.final_layernorm.weight"] = 1.0 + rnd(H, std=0.1)
    p["decoder.final_layernorm.bias"] = rnd(H, std=0.1)
    if cfg["untie_embeddings_and_output_weights"]:
        p["output_layer.weight"] = rnd(V, H, std=0.2)
    if cfg["normalization"] == "RMSNorm":
        for k in [k for k in p if k.endswith("layernorm.bias")]:
            del p[k]  # RMSNorm has no bias
    return {k: v.requires_grad_(True) for k, v in p.items()}


def forward(cfg, p, tokens):
    """tokens: (B, S+1) int64. Returns the mean cross-entropy over all B·S positions."""
    L, H, A = cfg["num_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    D = H // A
    kind, eps = cfg["normalization"], cfg["layernorm_epsilon"]
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    B, S = inputs.shape
    x = p["embedding.word_embeddings.weight"][inputs] + p["embedding.position_embeddings.weight"][:S]  # (B, S, H)
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)
    for l in range(L):
        pre = f"decoder.layers.{l}."
        h = norm(x, p[pre + "input_layernorm.weight"], p.get(pre + "input_layernorm.bias"), kind, eps)
        qkv = h @ p[pre + "self_attention.linear_qkv.weight"].T + p[pre + "self_attention.linear_qkv.bias"]
        qkv = qkv.view(B, S, A, 3, D)  # Megatron: per head [q | k | v]
        q, k, v = qkv[:, :, :, 0].transpose(1, 2), qkv[:, :, :, 1].transpose(1, 2), qkv[:, :, :, 2].transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        ctx = (probs @ v).transpose(1, 2).reshape(B, S, H)
        x = x + ctx @ p[pre + "self_attention.linear_proj.weight"].T + p[pre + "self_attention.linear_proj.bias"]
        h = norm(x, p[pre + "pre_mlp_layernorm.weight"], p.get(pre + "pre_mlp_layernorm.bias"), kind, eps)
        h = gelu_tanh(h @ p[pre + "mlp.linear_fc1.weight"].T + p[pre + "mlp.linear_fc1.bias"])
        x = x + h @ p[pre + "mlp.linear_fc2.weight"].T + p[pre + "mlp.linear_fc2.bias"]
    x = norm(x, p["decoder.final_layernorm.weight"], p.get("decoder.final_layernorm.bias"), kind, eps)
    out_w = p["output_layer.weight"] if cfg["untie_embeddings_and_output_weights"] else p["embedding.word_embeddings.weight"]
    logits = x @ out_w.T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def encode(t, dtype):
    return base64.b64encode(t.detach().to(dtype).contiguous().numpy().tobytes()).decode()


def make_case(name, cfg, seed):
    gen = torch.Generator().manual_seed(seed)
    p = make_params(cfg, gen)
    initial = {k: v.detach().clone() for k, v in p.items()}
    B, S, V = cfg["micro_batch_size"], cfg["seq_length"], cfg["vocab_size"]
    tokens = torch.randint(0, V, (cfg["global_batch_size"], S + 1), generator=gen)
    M = cfg["global_batch_size"] // B
    # Megatron: the iteration's loss is the mean of the micro-batch losses.
    losses = [forward(cfg, p, tokens[m * B:(m + 1) * B]) for m in range(M)]
    loss = sum(losses) / M
    loss.backward()
    grads = {k: v.grad.detach().clone() for k, v in p.items()}
    total_norm = torch.sqrt(sum((g ** 2).sum() for g in grads.values()))
    no_decay = [v for k, v in p.items() if k.endswith(".bias") or "layernorm" in k]
    decay = [v for k, v in p.items() if not (k.endswith(".bias") or "layernorm" in k)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(cfg["adam_beta1"], cfg["adam_beta2"]), eps=cfg["adam_eps"])
    torch.nn.utils.clip_grad_norm_(list(p.values()), cfg["clip_grad"])
    opt.step()
    tensors = [{"name": k, "shape": list(v.shape), "initial_f32": encode(initial[k], torch.float32),
                "grad_f64": encode(grads[k], torch.float64), "after_step_f64": encode(p[k], torch.float64)}
               for k, v in p.items()]
    return {"name": name, "config": cfg, "tokens": tokens.flatten().tolist(), "loss": loss.item(),
            "grad_norm": total_norm.item(), "tensors": tensors,
            "generator": f"tests/reference/make_gpt_reference.py (torch {torch.__version__}, float64)"}


def main(out_dir):
    torch.set_default_dtype(torch.float64)
    base = {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "ffn_hidden_size": 64, "seq_length": 12,
            "vocab_size": 40, "padded_vocab": 40, "micro_batch_size": 2, "global_batch_size": 2,
            "normalization": "LayerNorm", "layernorm_epsilon": 1e-5, "untie_embeddings_and_output_weights": False,
            # adam_eps is large on purpose: Adam divides each gradient by its own size, so with a tiny eps
            # the step of a (near-)zero gradient, such as the key bias whose true gradient is exactly
            # zero, follows rounding noise; eps = 1e-3 makes the step a smooth function of the gradient.
            "lr": 1e-2, "adam_beta1": 0.9, "adam_beta2": 0.95, "adam_eps": 1e-3, "weight_decay": 0.1,
            "clip_grad": 0.5}
    cases = [
        ("tied_layernorm", dict(base), 1),
        # Untied output layer, RMSNorm, and gradient accumulation over 2 micro-batches.
        ("untied_rmsnorm_accum", dict(base, normalization="RMSNorm", untie_embeddings_and_output_weights=True,
                                      global_batch_size=4, seq_length=10), 2),
    ]
    for name, cfg, seed in cases:
        with open(f"{out_dir}/gpt_reference_{name}.json", "w") as f:
            json.dump(make_case(name, cfg, seed), f)
        print(f"wrote {out_dir}/gpt_reference_{name}.json")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures")
