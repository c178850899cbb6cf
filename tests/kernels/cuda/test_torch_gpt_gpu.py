#!/usr/bin/python3
"""benchmarks/gpu/torch_gpt_gpu.py, the PyTorch side of scripts/gpu-check.sh, checked on the CPU so that
it cannot rot before the next GPU run:
1. its Llama model (RoPE rotate-half, SwiGLU, grouped-query attention, RMSNorm, QKV bias, untied head)
   loaded with the weights of tests/fixtures/llama_reference_mqa_qkv_bias.json gives that fixture's
   loss and gradient norm (tests/reference/make_llama_reference.py, an independent float64 Llama);
2. its command line trains a tiny GPT and a tiny Llama for two iterations on the CPU;
3. with mwb-gpu-bench given (CUDA builds), both programs agree on the parameter count (tiny shapes
   of each model gpu-check.sh runs) and on the model FLOPs per iteration (the shapes gpu-check.sh runs).
usage: test_torch_gpt_gpu.py REPO_ROOT [MWB_GPU_BENCH]. Exit 77 without PyTorch."""
import base64
import json
import os
import subprocess
import sys

root = sys.argv[1]
bench = sys.argv[2] if len(sys.argv) > 2 and os.access(sys.argv[2], os.X_OK) else None
try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIP: {e} (Debian's python3-torch)")
    sys.exit(77)
sys.path.insert(0, os.path.join(root, "benchmarks", "gpu"))
import torch_gpt_gpu as tg  # noqa: E402

script = os.path.join(root, "benchmarks", "gpu", "torch_gpt_gpu.py")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


# 1. The Llama block against the float64 fixture.
fx = json.load(open(os.path.join(root, "tests", "fixtures", "llama_reference_mqa_qkv_bias.json")))
cfg = dict(tg.FIELDS)
cfg.update({k: v for k, v in fx["config"].items() if k in tg.FIELDS})
cfg["group_query_attention"] = True
cfg["make_vocab_size_divisible_by"] = 1
m = tg.resolve(cfg)
torch.set_default_dtype(torch.float64)
model = tg.GPT(m)
w = {t["name"]: torch.from_numpy(np.frombuffer(base64.b64decode(t["initial_f32"]), dtype=np.float32).copy())
     .double().view(t["shape"]) for t in fx["tensors"]}
A, G, D, H = m["heads"], m["groups"], m["head_dim"], m["hidden"]


def split_qkv(t):
    """Megatron's fused rows per group [q heads of the group | k | v] -> the script's [q | k | v]."""
    t = t.view(G, A // G + 2, D, *t.shape[1:])
    return torch.cat([t[:, : A // G].reshape(A * D, *t.shape[3:]), t[:, A // G].reshape(G * D, *t.shape[3:]),
                      t[:, A // G + 1].reshape(G * D, *t.shape[3:])])


with torch.no_grad():
    model.wte.weight.copy_(w["embedding.word_embeddings.weight"])
    model.head.weight.copy_(w["output_layer.weight"])
    model.lnf.weight.copy_(w["decoder.final_layernorm.weight"])
    for i, b in enumerate(model.blocks):
        p = f"decoder.layers.{i}."
        b.ln1.weight.copy_(w[p + "input_layernorm.weight"])
        b.ln2.weight.copy_(w[p + "pre_mlp_layernorm.weight"])
        b.qkv.weight.copy_(split_qkv(w[p + "self_attention.linear_qkv.weight"]))
        b.qkv.bias.copy_(split_qkv(w[p + "self_attention.linear_qkv.bias"]))
        b.proj.weight.copy_(w[p + "self_attention.linear_proj.weight"])
        b.fc1.weight.copy_(w[p + "mlp.linear_fc1.weight"])
        b.fc2.weight.copy_(w[p + "mlp.linear_fc2.weight"])
check(len(list(model.parameters())) == len(fx["tensors"]), f"{len(fx['tensors'])} tensors, as the fixture")
tokens = torch.tensor(fx["tokens"]).view(cfg_gbs := fx["config"]["global_batch_size"], -1)
B = fx["config"]["micro_batch_size"]
losses = [model(tokens[i: i + B, :-1], tokens[i: i + B, 1:]) for i in range(0, cfg_gbs, B)]
loss = sum(losses) / len(losses)
loss.backward()
norm = torch.sqrt(sum((q.grad ** 2).sum() for q in model.parameters())).item()
# 1e-7: the fixture stores the initial weights as float32, and its norm weights (1 + N(0, 0.1²) in float64)
# are not float32 values; a wrong pairing, head order or scale moves the loss by far more.
check(abs(loss.item() - fx["loss"]) <= 1e-7 * abs(fx["loss"]), f"loss {loss.item():.12f} vs fixture {fx['loss']:.12f}")
check(abs(norm - fx["grad_norm"]) <= 1e-7 * fx["grad_norm"], f"gradient norm {norm:.12f} vs fixture {fx['grad_norm']:.12f}")
torch.set_default_dtype(torch.float32)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
    if r.returncode != 0 or not lines:
        print(" ".join(cmd), "\n", r.stdout, r.stderr)
        return None
    return json.loads(lines[-1])


# 2. The command line, a tiny GPT and a tiny Llama, two iterations on the CPU.
tiny = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
        "--micro-batch-size", "2", "--vocab-size", "300"]
tiny_llama = ["--preset", "llama-3.2-1b"] + tiny + ["--num-query-groups", "2", "--ffn-hidden-size", "96",
                                                     "--untie-embeddings-and-output-weights"]
for name, args in (("gpt", tiny), ("llama", tiny_llama)):
    r = run([sys.executable, script, "--device", "cpu", "--iters", "2", "--warmup", "1"] + args)
    check(r is not None and r["loss"] > 0 and r["tokens_per_s"] > 0 and r["model_flops_per_iter"] > 0,
          f"torch_gpt_gpu.py --device cpu trains the tiny {name}")

# 3. The same model on both sides: parameters (tiny shapes of each model) and FLOPs (gpu-check.sh's shapes).
if bench is None:
    print("mwb-gpu-bench not built (no CUDA here): parameter and FLOP agreement not checked")
else:
    shapes = {
        "gpt2-124m": ["--num-layers", "12", "--hidden-size", "768", "--num-attention-heads", "12",
                      "--seq-length", "1024", "--micro-batch-size", "8", "--vocab-size", "50304"],
        "gpt-1.3b": ["--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16",
                     "--seq-length", "2048", "--micro-batch-size", "4", "--vocab-size", "50304"],
        "llama-3.2-1b": ["--preset", "llama-3.2-1b", "--seq-length", "2048", "--micro-batch-size", "4"],
    }
    for name, args in list(shapes.items()) + [("tiny gpt", tiny), ("tiny llama", tiny_llama)]:
        mwb, pt = run([bench, "--describe"] + args), run([sys.executable, script, "--describe"] + args)
        if mwb is None or pt is None:
            check(False, f"{name}: --describe on both sides")
            continue
        keys = [k for k in pt if k not in ("params", "model_flops_per_iter")]
        check(all(mwb[k] == pt[k] for k in keys), f"{name}: the same shape ({', '.join(f'{k} {pt[k]}' for k in keys)})")
        rel = abs(mwb["model_flops_per_iter"] - pt["model_flops_per_iter"]) / mwb["model_flops_per_iter"]
        check(rel < 1e-12, f"{name}: model FLOPs {mwb['model_flops_per_iter']:.6g} (mwb) vs {pt['model_flops_per_iter']:.6g}")
        if pt["params"] is not None:
            check(mwb["params"] == pt["params"], f"{name}: {mwb['params']} parameters (mwb) vs {pt['params']} (PyTorch)")
print("FAIL" if failures else "PASS", f"({len(failures)} failed)")
sys.exit(1 if failures else 0)
