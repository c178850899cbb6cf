#!/usr/bin/env python3
"""Learning rate and weight decay of Megatron-LM's own OptimizerParamScheduler, for
tests/fixtures/lr_schedule_megatron.json (read by tests/backend/test_optim.cpp).

Runs the scheduler file of a Megatron-LM checkout unchanged (megatron/core/optimizer_param_scheduler.py;
its one import from megatron is stubbed); the arguments are derived from each configuration as
megatron/training/training.py's get_optimizer_param_scheduler derives them. By hand:
    git -C Megatron-LM show HEAD:megatron/core/optimizer_param_scheduler.py > /tmp/ops.py
    /usr/bin/python3 tests/reference/make_lr_schedule_reference.py /tmp/ops.py d98e8a6 > tests/fixtures/lr_schedule_megatron.json
"""
import importlib.util
import json
import sys
import types

path, commit = sys.argv[1], sys.argv[2]
utils = types.ModuleType("megatron.core.utils")
utils.log_single_rank = lambda *a, **k: None
for name in ("megatron", "megatron.core"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["megatron.core.utils"] = utils
spec = importlib.util.spec_from_file_location("optimizer_param_scheduler", path)
ops = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ops)


class Optimizer:  # what the scheduler touches: param_groups
    def __init__(self):
        self.param_groups = [{}]


def scheduler_args(c):
    """get_optimizer_param_scheduler (training.py), both branches."""
    if c.get("train_iters"):
        gbs = c["global_batch_size"]
        decay = c.get("lr_decay_iters") or c["train_iters"]
        lr_decay_steps = decay * gbs
        wd_incr_steps = c["train_iters"] * gbs
        wsd = c.get("lr_wsd_decay_iters")
        wsd_decay_steps = wsd * gbs if wsd else None
        frac = c.get("lr_warmup_fraction")
        lr_warmup_steps = frac * lr_decay_steps if frac else c.get("lr_warmup_iters", 0) * gbs
    else:
        lr_decay_steps = c.get("lr_decay_samples") or c["train_samples"]
        wd_incr_steps = c["train_samples"]
        wsd_decay_steps = c.get("lr_wsd_decay_samples")
        frac = c.get("lr_warmup_fraction")
        lr_warmup_steps = frac * lr_decay_steps if frac else c.get("lr_warmup_samples", 0)
    style = c.get("weight_decay_incr_style", "constant")
    wd = c.get("weight_decay", 0.01)
    start_wd = c.get("start_weight_decay", wd) if style != "constant" else wd
    end_wd = c.get("end_weight_decay", wd) if style != "constant" else wd
    return dict(init_lr=c.get("lr_warmup_init", 0.0), max_lr=c["lr"], min_lr=c.get("min_lr", 0.0),
                lr_warmup_steps=lr_warmup_steps, lr_decay_steps=lr_decay_steps,
                lr_decay_style=c.get("lr_decay_style", "linear"), start_wd=start_wd, end_wd=end_wd,
                wd_incr_steps=wd_incr_steps, wd_incr_style=style, use_checkpoint_opt_param_scheduler=False,
                override_opt_param_scheduler=False, wsd_decay_steps=wsd_decay_steps,
                lr_wsd_decay_style=c.get("lr_wsd_decay_style", "exponential"))


configs = [
    dict(lr=1e-3, min_lr=1e-4, train_iters=100, global_batch_size=8, lr_warmup_iters=10, lr_decay_style="cosine"),
    dict(lr=1e-3, min_lr=1e-4, train_iters=100, global_batch_size=8, lr_warmup_iters=10, lr_decay_iters=80,
         lr_warmup_init=1e-5, lr_decay_style="linear"),
    dict(lr=6e-5, min_lr=6e-6, train_iters=500, global_batch_size=4, lr_warmup_fraction=0.01, lr_decay_iters=430,
         lr_decay_style="cosine"),
    dict(lr=2e-3, min_lr=1e-5, train_iters=100, global_batch_size=2, lr_warmup_iters=10,
         lr_decay_style="inverse-square-root"),
    dict(lr=3e-4, min_lr=3e-5, train_samples=4000, lr_warmup_samples=400, lr_decay_samples=3600,
         lr_decay_style="cosine", weight_decay_incr_style="linear", start_weight_decay=0.0, end_weight_decay=0.1),
    dict(lr=1e-3, min_lr=0.0, train_iters=200, global_batch_size=4, lr_warmup_iters=20, lr_decay_style="constant",
         weight_decay_incr_style="cosine", start_weight_decay=0.01, end_weight_decay=0.05),
]
for wsd_style in ("exponential", "linear", "cosine", "minus_sqrt"):
    configs.append(dict(lr=1e-3, min_lr=1e-4, train_iters=100, global_batch_size=4, lr_warmup_iters=5,
                        lr_decay_style="WSD", lr_wsd_decay_style=wsd_style, lr_wsd_decay_iters=30))
configs.append(dict(lr=1e-3, min_lr=1e-4, train_samples=1000, lr_warmup_samples=50, lr_decay_style="WSD",
                    lr_wsd_decay_style="cosine", lr_wsd_decay_samples=250))

out = {"source": f"NVIDIA/Megatron-LM {commit}: megatron/core/optimizer_param_scheduler.py", "cases": []}
for c in configs:
    s = ops.OptimizerParamScheduler(Optimizer(), **scheduler_args(c))
    total = s.lr_decay_steps * 1.1
    points = []
    for k in range(0, 161):
        n = int(round(total * k / 160))
        s.num_steps = n
        points.append([n, s.get_lr({}), s.get_wd()])
    out["cases"].append({"config": c, "points": points})
json.dump(out, sys.stdout, separators=(",", ":"))
print()
