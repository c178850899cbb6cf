#!/usr/bin/python3
"""Builds the 16-bit PyTorch references for tests/backend/test_sixteen_bit_reference.cpp (bf16) and
test_gpt_reference.cpp (fp16_matches_its_rounding_points).

The float64 references (make_gpt_reference.py, make_llama_reference.py) say what the model computes; they
cannot say whether mwb's --bf16 / --fp16 round where they should: a missing or extra rounding hides
inside the sqrt(K)·u tolerance of the comparison with float64. This script runs the same fixtures (their
config, initial weights and tokens, read from their JSON) in float32 arithmetic with an explicit rounding
`t.to(torch.bfloat16 or torch.float16).float()` at exactly mwb's 16-bit storage points, so that mwb and
this reference differ only where float32 accumulation order or the exp approximation flips a 16-bit
rounding. It writes the loss and every parameter's gradient (float32) to
tests/fixtures/sixteen_bit_reference_<case>.json. Run with Debian's python3-torch:
    /usr/bin/python3 tests/reference/make_sixteen_bit_reference.py tests/fixtures
or, to add or recompute only some recipes and keep the others' bytes (bf16 depends on the BLAS):
    /usr/bin/python3 tests/reference/make_sixteen_bit_reference.py tests/fixtures fp16_f16_grads

mwb's recipe (Megatron's --bf16 / --fp16 with fp32 master weights; docs/numerics.md has the same list):
  - Weights: the fp32 master weights rounded to 16 bits once per step (the model's copy); every op reads
    the rounded copy. Weight gradients are accumulated in fp32 (over micro-batches too, like Megatron's
    gradient-accumulation fusion into main_grad) and never rounded; except in the recipe
    "fp16_f16_grads" (--fp16 without accumulate_allreduce_grads_in_fp32): there the main grads are fp16
    and each op's fp32 contribution is added and rounded into them once per call (run()).
  - Every op computes in fp32 from 16-bit-valued inputs (GEMMs accumulate in fp32) and its stored output
    is rounded once, to nearest even. Stored (rounded) forward tensors:
      embedding sum (word + position) | per layer: norm 1 output, qkv = linear incl. bias, qkv after RoPE
      (the cos/sin tables are rounded too), attention context, x + proj(context) + bias (one rounding:
      GEMM, bias and residual add are one fused step), norm 2 output, fc1 = linear incl. bias, GELU or
      SwiGLU output, x2 + fc2(act) + bias (one rounding) | final norm output, logits.
  - Not rounded (fp32): norm statistics (mean, 1/rms), attention scores and probabilities (the CPU
    stores the probabilities in fp32; mwb's CUDA bf16 kernels round them before P @ V as
    FlashAttention-2 does), the cross-entropy's softmax, max and log-sum-exp; the loss is summed in
    float64 from fp32 per-row values.
  - Backward: the gradient of every stored forward tensor is rounded once, after all of its
    contributions are summed in fp32 (the residual stream's gradient is the sum of the identity path and
    the norm's input gradient, rounded once). So the rounded gradients are: logits (the cross-entropy's
    gradient, already multiplied by the loss scale), final norm output, each layer's output and residual
    x2, fc2's input (act), fc1's output, norm 2 output, context, qkv after and before RoPE, norm 1 output,
    the embedding sum. The attention's internal gradients (of probabilities and scores) stay fp32.
  - fp16 multiplies the loss by a scale (the test: 2^12) before backward, so the logits' gradient is
    rounded in its scaled form; gradients are divided by the scale in fp32 afterwards. bf16: scale 1.

Why not torch.autocast: autocast rounds at different points. Under autocast a matmul's output is 16-bit
but layer_norm, softmax and cross_entropy run in fp32 and return fp32, and elementwise ops follow their
inputs' dtype, so the residual stream (fp32 embedding + 16-bit branch promotes to fp32) and every norm
output stay fp32, while the attention probabilities are rounded to 16 bits when they enter probs @ v,
and the weights are cast at each use rather than held as one rounded copy. That is a mixed-precision
recipe, not Megatron's 16-bit model; compared with it, mwb would differ by whole roundings again and
the bound could be no tighter than against float64. Emulating mwb's points makes the check say exactly
"mwb rounds here and nowhere else".

The script checks itself: with no rounding it must reproduce the float64 fixture's loss and gradients
to float32 accuracy. It also measures two noise floors and stores them beside the results:
"accumulation_noise", the same recipe with every matmul accumulated in float64 (what another summation
order alone does: the floor the C++ test's bound must cover), and "jitter_noise", the worst of 8 runs
with every value multiplied by 1 + k·2^-24, k a random integer in -4..4 (up to about 4 float32
ulps), just before each 16-bit rounding (a pessimistic
model of other exp/tanh/rsqrt implementations at every op at once; docs/numerics.md explains why this
one reaches the float64 comparison's level: one flipped rounding flips about a fifth of its consumers).
For bf16 it stores "sgemm_probe": the float32 results of every linear's GEMMs (forward, input and weight
gradient; layer 0 and the output layer) as this PyTorch's BLAS computed them, with their inputs. The bf16
bound holds only where mwb's sgemm gives these bits exactly (the same kernel family); the C++ test checks
that and skips otherwise. So generate on a machine whose BLAS kernels match CI's usual one (OpenBLAS's
own choice on AVX-512: SkylakeX), with OPENBLAS_CORETYPE unset.
"""
import base64
import json
import math
import os
import sys

import torch

from make_gpt_reference import encode, gelu_tanh
from make_llama_reference import inv_frequencies

CASES = ["gpt_reference_tied_layernorm", "gpt_reference_untied_rmsnorm_accum", "llama_reference_gqa_rope_scaled",
         "llama_reference_mqa_qkv_bias", "llama_reference_gqa_rope_interleaved"]
TRIALS = 8
# recipe: (16-bit dtype, loss scale, f16 gradient arena). "fp16_f16_grads": --fp16 without
# accumulate_allreduce_grads_in_fp32, whose main grads are an f16 arena (see run()).
RECIPES = {"bf16": (torch.bfloat16, 1.0, False), "fp16": (torch.float16, 4096.0, False),
           "fp16_f16_grads": (torch.float16, 4096.0, True)}
# The fixtures that carry the f16-gradient recipe: the tied embedding (two contributions a micro-batch)
# and gradient accumulation over micro-batches (a rounding per micro-batch).
F16_GRADS_CASES = ["gpt_reference_tied_layernorm", "gpt_reference_untied_rmsnorm_accum"]


class Store(torch.autograd.Function):
    """A 16-bit store: rounds the value in forward and its (summed) gradient in backward. With `jitter` (a
    torch.Generator), each value is first multiplied by 1 + k·2^-24, k random in -4..4: about as far as
    another fp32 summation order or exp/tanh implementation can move it before the rounding."""

    @staticmethod
    def forward(ctx, x, dtype, jitter):
        ctx.dtype, ctx.jitter = dtype, jitter
        return shake(x, jitter).to(dtype).float()

    @staticmethod
    def backward(ctx, g):
        return shake(g, ctx.jitter).to(ctx.dtype).float(), None, None


def shake(x, jitter):
    if jitter is None:
        return x
    ulps = torch.randint(-4, 5, x.shape, generator=jitter, dtype=torch.float64)
    return (x.double() * (1 + ulps * 2.0 ** -24)).float()


class Recipe:
    def __init__(self, dtype, accumulate64=False, jitter=None, taps=None):
        self.dtype, self.accumulate64, self.jitter, self.taps = dtype, accumulate64, jitter, taps

    def store(self, x):
        return x if self.dtype is None else Store.apply(x, self.dtype, self.jitter)

    def round_value(self, x):  # forward only: the weights' model copy and the RoPE tables
        return x if self.dtype is None else x.to(self.dtype).float()

    def mm(self, a, b):
        return (a.double() @ b.double()).float() if self.accumulate64 else a @ b

    def linear(self, x, w, name):
        """x·wᵀ for the weight `name`; with `taps` (a dict), the first input each weight sees is kept."""
        if self.taps is not None:
            self.taps.setdefault(name, x.detach().reshape(-1, x.shape[-1]))
        return self.mm(x, w.T)


def decode(b64, dtype):
    return torch.frombuffer(bytearray(base64.b64decode(b64)), dtype=dtype).clone()


def dims(cfg):
    A = cfg["num_attention_heads"]
    return {"A": A, "G": cfg.get("num_query_groups", A), "D": cfg.get("kv_channels", cfg["hidden_size"] // A),
            "swiglu": cfg.get("swiglu", False), "rope": cfg.get("position_embedding_type") == "rope",
            "rmsnorm": cfg["normalization"] == "RMSNorm", "eps": cfg["layernorm_epsilon"]}


def norm(rc, d, x, w, b):
    """fp32 statistics, one rounding of the output (mwb's norm_forward)."""
    if d["rmsnorm"]:
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + d["eps"]) * w
    else:
        y = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, d["eps"])
    return rc.store(y)


def rope_tables(rc, cfg, S):
    """float64 angles, cos/sin to float32, then rounded like any stored activation (mwb's rope tables)."""
    angles = torch.arange(S, dtype=torch.float64)[:, None] * inv_frequencies(cfg)[None, :]
    return rc.round_value(angles.cos().float()), rc.round_value(angles.sin().float())


def rope(x, cos, sin, R, interleaved):
    """x (B, S, G, W, D) with its first R dims of each head rotated (fp32), cos/sin (S, R/2)."""
    c, s = cos[None, :, None, None, :], sin[None, :, None, None, :]
    rot, rest = x[..., :R], x[..., R:]
    if interleaved:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack((a * c - b * s, b * c + a * s), dim=-1).flatten(-2)
    else:
        a, b = rot[..., :R // 2], rot[..., R // 2:]
        out = torch.cat((a * c - b * s, b * c + a * s), dim=-1)
    return torch.cat((out, rest), dim=-1)


def embed(rc, w, inputs):
    """Word + position embedding, one rounding of the sum."""
    x = w["embedding.word_embeddings.weight"][inputs]
    if "embedding.position_embeddings.weight" in w:
        x = x + w["embedding.position_embeddings.weight"][:inputs.shape[1]]
    return rc.store(x)


def initial_weights(fx, rc):
    return {t["name"]: rc.round_value(decode(t["initial_f32"], torch.float32).reshape(t["shape"])) for t in fx["tensors"]}


def batch_tokens(fx):
    cfg = fx["config"]
    return torch.tensor(fx["tokens"], dtype=torch.int64).reshape(cfg["global_batch_size"], cfg["seq_length"] + 1)


def sgemm_probe(fx, dtype):
    """The float32 results of every linear's GEMMs (layer 0's and the output layer's) as this PyTorch computes
    them, so that the C++ test can check the premise of its tight bound: that mwb's sgemm sums in the same
    order as this generator's (the same BLAS kernels), i.e. gives bit-identical fp32 values before each 16-bit
    rounding. For each weight W (out, in), rounded as in the recipe, and x (N, in), the input it gets in the
    recipe's first micro-batch: y = x·Wᵀ (forward, depth in), dx = dy·W (input gradient, depth out) and
    dw = dyᵀ·x (weight gradient, depth N), with dy = y rounded to 16 bits standing in for the output's
    gradient (same shape, 16-bit values)."""
    cfg, taps = fx["config"], {}
    rc = Recipe(dtype, taps=taps)
    w = initial_weights(fx, rc)
    with torch.no_grad():
        forward(rc, cfg, w, batch_tokens(fx)[:cfg["micro_batch_size"]])
        probe = []
        for name, x in taps.items():
            if name.startswith("decoder.layers.") and not name.startswith("decoder.layers.0."):
                continue  # the other layers' GEMMs have layer 0's shapes
            y = x @ w[name].T
            dy = y.to(dtype).float()
            probe.append({"weight": name, "x": encode(x, torch.float32), "y": encode(y, torch.float32),
                          "dx": encode(dy @ w[name], torch.float32), "dw": encode(dy.T @ x, torch.float32)})
        return probe


def forward(rc, cfg, w, tokens):
    """The mean cross-entropy of one micro-batch, on Megatron-layout weights `w` (already rounded)."""
    d = dims(cfg)
    A, G, D = d["A"], d["G"], d["D"]
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    B, S = inputs.shape
    x = embed(rc, w, inputs)
    if d["rope"]:
        cos, sin = rope_tables(rc, cfg, S)
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)
    for l in range(cfg["num_layers"]):
        pre = f"decoder.layers.{l}."
        get = lambda name: w.get(pre + name)
        h = norm(rc, d, x, get("input_layernorm.weight"), get("input_layernorm.bias"))
        qkv = rc.linear(h, get("self_attention.linear_qkv.weight"), pre + "self_attention.linear_qkv.weight")
        if get("self_attention.linear_qkv.bias") is not None:
            qkv = qkv + get("self_attention.linear_qkv.bias")
        qkv = rc.store(qkv).view(B, S, G, A // G + 2, D)  # per group [q heads | k | v]
        if d["rope"]:  # queries and keys; values are not rotated
            qk = rope(qkv[:, :, :, :A // G + 1], cos, sin, int(D * cfg["rotary_percent"]),
                      cfg.get("rotary_interleaved", False))
            qkv = rc.store(torch.cat((qk, qkv[:, :, :, A // G + 1:]), dim=3))
        q = qkv[:, :, :, :A // G].reshape(B, S, A, D).transpose(1, 2)
        k = qkv[:, :, :, A // G].transpose(1, 2).repeat_interleave(A // G, dim=1)
        v = qkv[:, :, :, A // G + 1].transpose(1, 2).repeat_interleave(A // G, dim=1)
        scores = rc.mm(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(D))  # fp32, never rounded
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        ctx = rc.store(rc.mm(probs, v).transpose(1, 2).reshape(B, S, A * D))
        branch = rc.linear(ctx, get("self_attention.linear_proj.weight"), pre + "self_attention.linear_proj.weight")
        if get("self_attention.linear_proj.bias") is not None:
            branch = branch + get("self_attention.linear_proj.bias")
        x = rc.store(x + branch)
        h = norm(rc, d, x, get("pre_mlp_layernorm.weight"), get("pre_mlp_layernorm.bias"))
        fc1 = rc.linear(h, get("mlp.linear_fc1.weight"), pre + "mlp.linear_fc1.weight")
        if get("mlp.linear_fc1.bias") is not None:
            fc1 = fc1 + get("mlp.linear_fc1.bias")
        fc1 = rc.store(fc1)
        if d["swiglu"]:
            gate, up = fc1.chunk(2, dim=-1)
            act = rc.store(torch.nn.functional.silu(gate) * up)
        else:
            act = rc.store(gelu_tanh(fc1))
        branch = rc.linear(act, get("mlp.linear_fc2.weight"), pre + "mlp.linear_fc2.weight")
        if get("mlp.linear_fc2.bias") is not None:
            branch = branch + get("mlp.linear_fc2.bias")
        x = rc.store(x + branch)
    x = norm(rc, d, x, w["decoder.final_layernorm.weight"], w.get("decoder.final_layernorm.bias"))
    out_name = "output_layer.weight" if "output_layer.weight" in w else "embedding.word_embeddings.weight"
    logits = rc.store(rc.linear(x, w[out_name], out_name))
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def run(fx, rc, loss_scale, f16_grads=False):
    """One iteration's loss (mean of the micro-batches') and the unscaled gradients (fp32 values).

    f16_grads: the main grads are an f16 arena (mwb's fp16 runs without accumulate_allreduce_grads_in_fp32):
    each op that writes a parameter's gradient adds its fp32 contribution to the f16 value in fp32 and
    rounds the sum once, per call. Every parameter gets one call a micro-batch, except the tied word
    embedding: the head's dW first (the head's backward runs at the end of the forward), then the
    embedding's scatter. The division by the loss scale (a power of two) is exact."""
    cfg = fx["config"]
    w = {k: v.requires_grad_(True) for k, v in initial_weights(fx, rc).items()}
    tokens = batch_tokens(fx)
    B = cfg["micro_batch_size"]
    M = cfg["global_batch_size"] // B
    emb = "embedding.word_embeddings.weight"
    tied = f16_grads and "output_layer.weight" not in w
    acc = {k: torch.zeros_like(v) for k, v in w.items()}
    store_grad = lambda g: shake(g, rc.jitter).to(torch.float16).float()
    loss = 0.0
    for m in range(M):
        wm = w
        if tied:  # the head's use of the tied weight as a leaf of its own, to keep its contribution apart
            wm = dict(w)
            wm["output_layer.weight"] = w[emb].detach().clone().requires_grad_(True)
        lm = forward(rc, cfg, wm, tokens[m * B:(m + 1) * B])
        (lm * (loss_scale / M)).backward()  # mwb: the logits' gradient carries loss_scale / M
        loss += lm.item() / M
        if f16_grads:
            for k, v in w.items():
                if tied and k == emb:
                    acc[k] = store_grad(acc[k] + wm["output_layer.weight"].grad)
                acc[k] = store_grad(acc[k] + v.grad)
                v.grad = None
    grads = acc if f16_grads else {k: v.grad for k, v in w.items()}
    return loss, {k: g / loss_scale for k, g in grads.items()}


def normwise(a, ref):
    a, ref = a.flatten(), ref.flatten()
    return ((a.double() - ref.double()).abs().max() / ref.double().abs().max().clamp_min(1e-30)).item()


def make(in_dir, name, only=None):
    with open(f"{in_dir}/{name}.json") as f:
        fx = json.load(f)
    # Self-check: without rounding, the same code is the float32 twin of the float64 reference.
    loss, grads = run(fx, Recipe(None), 1.0)
    worst = max(normwise(grads[t["name"]], decode(t["grad_f64"], torch.float64)) for t in fx["tensors"])
    assert abs(loss - fx["loss"]) <= 1e-5 * abs(fx["loss"]) and worst < 1e-5, \
        f"{name}: the unrounded forward does not match the float64 fixture (loss {loss} vs {fx['loss']}, {worst})"
    out = {"fixture": f"{name}.json", "recipes": {},
           "generator": f"tests/reference/make_sixteen_bit_reference.py (torch {torch.__version__}, float32 with "
                        "16-bit rounding at mwb's storage points)"}
    for recipe, (dtype, scale, f16_grads) in RECIPES.items():
        if (only and recipe not in only) or (f16_grads and name not in F16_GRADS_CASES):
            continue
        run_ = lambda rc: run(fx, rc, scale, f16_grads)
        loss, grads = run_(Recipe(dtype))
        # The noise floors: the same recipe with every matmul accumulated in float64 (another summation
        # order), and the worst of TRIALS runs with every stored value jittered by a few fp32 ulps before
        # its rounding (a pessimistic model of other exp/tanh/rsqrt implementations everywhere at once).
        loss64, grads64 = run_(Recipe(dtype, accumulate64=True))
        accumulation = {"loss": abs(loss64 - loss) / abs(loss),
                        "gradients": {k: normwise(grads64[k], grads[k]) for k in grads}}
        jitter = {"loss": 0.0, "gradients": {k: 0.0 for k in grads}}
        for trial in range(TRIALS):
            loss_j, grads_j = run_(Recipe(dtype, jitter=torch.Generator().manual_seed(trial)))
            jitter["loss"] = max(jitter["loss"], abs(loss_j - loss) / abs(loss))
            for k in grads:
                jitter["gradients"][k] = max(jitter["gradients"][k], normwise(grads_j[k], grads[k]))
        for noise in (accumulation, jitter):
            noise["worst_gradient"] = max(noise["gradients"].values())
        out["recipes"][recipe] = {"loss_scale": scale, "loss": loss, "accumulation_noise": accumulation,
                                  "jitter_noise": jitter,
                                  "grads": {k: encode(g, torch.float32) for k, g in grads.items()}}
        if recipe == "bf16":  # the premise of the bf16 rows' tight bound (test_sixteen_bit_reference.cpp)
            out["recipes"][recipe]["sgemm_probe"] = sgemm_probe(fx, dtype)
        print(f"{name} {recipe}: loss {loss:.7f} (float64 {fx['loss']:.7f}); relative change of the loss and worst "
              f"normwise change of a gradient under float64 accumulation {accumulation['loss']:.1e} "
              f"{accumulation['worst_gradient']:.1e}, under fp32 jitter {jitter['loss']:.1e} {jitter['worst_gradient']:.1e}")
    return out


def main(out_dir, only=None):
    """only: recipe names to (re)compute; the fixture's other recipes are kept as they are (their bf16
    rows depend on the generating machine's BLAS: see the docstring)."""
    torch.set_num_threads(1)
    for name in CASES:
        if only and not any(RECIPES[r][2] is False or name in F16_GRADS_CASES for r in only):
            continue
        out = make(out_dir, name, only)
        path = f"{out_dir}/sixteen_bit_reference_{name.replace('_reference_', '_')}.json"
        if only:
            with open(path) as f:
                kept = json.load(f)
            kept["recipes"].update(out["recipes"])
            out = kept
        with open(path + ".tmp", "w") as f:
            json.dump(out, f)
        os.replace(path + ".tmp", path)
        print(f"wrote {path}")


if __name__ == "__main__":
    # make_sixteen_bit_reference.py [out_dir [recipe ...]]: with recipes, only those are recomputed.
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures", sys.argv[2:] or None)
