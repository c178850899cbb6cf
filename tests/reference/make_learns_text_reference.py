#!/usr/bin/python3
"""Builds tests/fixtures/learns_text_kjv.json for tests/backend/test_learns_text.cpp.

The same small GPT as mwb-train's run of tests/fixtures/learns_text_config.json, trained in PyTorch on
the same tokens in the same order from the same initial weights with the same schedule, in float64
(the reference) and in float32 (how far rounding alone moves the result: the test's tolerance is
derived from it). Nothing of mwb's training code is used, only what mwb-train leaves on disk:
  - the initial weights: one mwb-train run of the config stopped after iteration 1 (--exit-interval 1
    --save), whose learning rate is Megatron's warm-up value for step 0, i.e. 0, so the checkpoint
    holds the weights as initialised (checked: the step record says lr 0);
  - the token order: the bundled corpus's Megatron indexed dataset (.bin/.idx) and the GPTDataset
    index caches (document, sample, shuffle .npy) that run wrote, read with NumPy and turned into
    samples as Megatron-LM's GPTDataset._query_document_sample_shuffle_indices does.
The model is make_gpt_reference.py's forward; the optimiser torch.optim.AdamW with global-norm
clipping; the learning rate Megatron-LM's OptimizerParamScheduler formula (linear warm-up from 0 by
samples, cosine to min_lr). Run with Debian's python3-torch (a few minutes on 2 cores):
    /usr/bin/python3 tests/reference/make_learns_text_reference.py build tests/fixtures
"""
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gpt_reference import forward  # noqa: E402

MMIDIDX_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
                  8: np.uint16}


class IndexedDataset:
    """Megatron's MMIDIDX .idx + .bin, read with NumPy."""

    def __init__(self, prefix):
        with open(prefix + ".idx", "rb") as f:
            assert f.read(9) == b"MMIDIDX\x00\x00", prefix + ".idx: not an MMIDIDX index"
            version, = np.frombuffer(f.read(8), "<u8")
            assert version == 1
            code = f.read(1)[0]
            count, = np.frombuffer(f.read(8), "<u8")
            f.read(8)  # document count
            self.lengths = np.frombuffer(f.read(4 * int(count)), "<i4")
            self.pointers = np.frombuffer(f.read(8 * int(count)), "<i8")
        self.dtype = np.dtype(MMIDIDX_DTYPES[code])
        self.bin = np.memmap(prefix + ".bin", dtype=self.dtype, mode="r")

    def get(self, i, offset=0, length=None):
        start = int(self.pointers[i]) // self.dtype.itemsize + offset
        n = int(self.lengths[i]) - offset if length is None else length
        return np.asarray(self.bin[start:start + n], dtype=np.int64)


class GPTSamples:
    """Megatron-LM's GPTDataset sample lookup over the three cached indices."""

    def __init__(self, data, cache_dir, split):
        def load(kind):
            (path,) = glob.glob(f"{cache_dir}/*-GPTDataset-{split}-{kind}.npy")
            return np.load(path)

        self.data = data
        self.document, self.sample, self.shuffle = load("document_index"), load("sample_index"), load("shuffle_index")

    def __getitem__(self, idx):
        idx = int(self.shuffle[idx % len(self.shuffle)])
        (beg, beg_off), (end, end_off) = self.sample[idx], self.sample[idx + 1]
        if beg == end:
            return self.data.get(self.document[beg], beg_off, end_off - beg_off + 1)
        parts = [self.data.get(self.document[i], beg_off if i == beg else 0, end_off + 1 if i == end else None)
                 for i in range(beg, end + 1)]
        return np.concatenate(parts)

    def batch(self, first, count):
        return torch.from_numpy(np.stack([self[first + j] for j in range(count)]))


def megatron_lr(cfg, samples):
    """OptimizerParamScheduler.get_lr with its step counted in samples (warm-up from lr_warmup_init 0)."""
    gbs = cfg["global_batch_size"]
    warmup, decay = cfg["lr_warmup_iters"] * gbs, cfg["lr_decay_iters"] * gbs
    lr, min_lr = cfg["lr"], cfg["min_lr"]
    if warmup > 0 and samples <= warmup:
        return lr * samples / warmup
    if samples > decay:
        return min_lr
    ratio = (samples - warmup) / (decay - warmup)
    return min_lr + 0.5 * (math.cos(math.pi * ratio) + 1.0) * (lr - min_lr)


def read_checkpoint(folder):
    meta = json.load(open(f"{folder}/metadata.json"))
    out = {}
    for t in meta["tensors"]:
        if not t["name"].startswith("param/"):
            continue
        assert t["dtype"] == "f32" and t["shape"] == t["global_shape"], t["name"]
        raw = np.fromfile(f"{folder}/{t['file']}", dtype="<f4", count=t["bytes"] // 4, offset=t["offset"])
        out[t["name"][len("param/"):]] = torch.from_numpy(raw.reshape(t["shape"]).copy())
    return meta, out


def train(cfg, model_cfg, initial, train_data, valid_data, dtype):
    p = {k: v.to(dtype).clone().requires_grad_(True) for k, v in initial.items()}
    no_decay = [v for k, v in p.items() if v.dim() == 1]  # Megatron: biases and norm weights
    decay = [v for k, v in p.items() if v.dim() > 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=0.0, betas=(cfg["adam_beta1"], cfg["adam_beta2"]), eps=cfg["adam_eps"])
    gbs, mbs = cfg["global_batch_size"], cfg["micro_batch_size"]
    M = gbs // mbs
    losses, norms = [], []
    for it in range(cfg["train_iters"]):
        for g in opt.param_groups:
            g["lr"] = megatron_lr(cfg, it * gbs)
        opt.zero_grad()
        loss = 0.0
        for m in range(M):  # Megatron: the iteration's loss is the mean of the micro-batch losses
            micro = forward(model_cfg, p, train_data.batch(it * gbs + m * mbs, mbs)) / M
            micro.backward()
            loss += micro.item()
        norms.append(torch.nn.utils.clip_grad_norm_(list(p.values()), cfg["clip_grad"]).item())
        opt.step()
        losses.append(loss)
        if it == 0 or (it + 1) % 20 == 0:
            print(f"  {dtype}: iter {it + 1} loss {loss:.4f} grad norm {norms[-1]:.3f}", flush=True)
    with torch.no_grad():  # eval_iters global batches of fresh validation samples, from the first
        batches = [sum(forward(model_cfg, p, valid_data.batch(k * gbs + m * mbs, mbs)).item() for m in range(M)) / M
                   for k in range(cfg["eval_iters"])]
    return losses, norms, sum(batches) / len(batches)


def main(build, out_dir):
    here = os.path.dirname(os.path.abspath(__file__))
    config_path = os.path.join(here, "..", "fixtures", "learns_text_config.json")
    cfg = json.load(open(config_path))
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, XDG_DATA_HOME=f"{tmp}/xdg")  # the bundled corpus, prepared afresh
        subprocess.run([f"{build}/backend/mwb-train", "--config", config_path, "--exit-interval", "1",
                        "--save", f"{tmp}/ckpt", "--data-cache-path", f"{tmp}/cache", "--run-dir", f"{tmp}/run"],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        step = json.loads(open(f"{tmp}/run/metrics.jsonl").readline())
        assert step["topic"] == "step" and step["iteration"] == 1 and step["lr"] == 0.0, step
        meta, initial = read_checkpoint(f"{tmp}/ckpt/iter_0000001")
        (prefix,) = {d["dataset_path"] for d in
                     (json.load(open(f)) for f in glob.glob(f"{tmp}/cache/*-description.txt"))}
        data = IndexedDataset(prefix)
        train_data, valid_data = GPTSamples(data, f"{tmp}/cache", "train"), GPTSamples(data, f"{tmp}/cache", "valid")
        saved = meta["config"]
        model_cfg = {k: saved[k] for k in ("num_layers", "hidden_size", "num_attention_heads", "normalization",
                                           "layernorm_epsilon", "untie_embeddings_and_output_weights")}
        assert saved["ffn_hidden_size"] == 4 * saved["hidden_size"] and saved["add_bias_linear"]
        runs = {}
        for name, dtype in (("float64", torch.float64), ("float32", torch.float32)):
            losses, norms, valid = train(cfg, model_cfg, initial, train_data, valid_data, dtype)
            runs[name] = {"train_loss": losses, "grad_norm": norms, "valid_loss": valid}
            print(f"{name}: final train loss {losses[-1]:.4f}, validation loss {valid:.4f}")
    fixture = {"config": cfg, "reference": runs["float64"], "float32": runs["float32"],
               "generator": f"tests/reference/make_learns_text_reference.py (torch {torch.__version__}, float64 "
                            "and float32)"}
    with open(f"{out_dir}/learns_text_kjv.json", "w") as f:
        json.dump(fixture, f, indent=1)
    print(f"wrote {out_dir}/learns_text_kjv.json")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build", sys.argv[2] if len(sys.argv) > 2 else "tests/fixtures")
