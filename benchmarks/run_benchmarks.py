#!/usr/bin/python3
"""Runs the training benchmark of docs/performance.md: mwb-train and PyTorch side by side on the same
model shapes, threads and random tokens, with OpenBLAS pinned to its Haswell kernels
(OPENBLAS_CORETYPE=Haswell, as the test environment) and unpinned. Prints a markdown table and writes
the raw numbers as JSON. Usage: benchmarks/run_benchmarks.py BUILD_DIR [--quick] [--json OUT]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench_model import SHAPES, model, mwb_flags


def run_child(cmd, env):
    """Runs cmd; returns its stdout and its own peak resident set size (bytes), from wait4."""
    with tempfile.TemporaryFile(mode="w+") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.DEVNULL, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}")
        out.seek(0)
        return out.read(), usage.ru_maxrss * 1024


def sgemm_peaks(build, env):
    """Each BLAS of the build's square-2048 sgemm GFLOP/s: {"OpenBLAS": x, "oneDNN": y}."""
    out = subprocess.run([f"{build}/benchmarks/mwb-bench-ops", "--sgemm-peak"], env=env, check=True,
                         capture_output=True, text=True).stdout
    return {name: float(v) for name, v in (line.split() for line in out.strip().splitlines())}


def sgemm_peak(build, env):
    """The machine's peak reference: the best library's sgemm."""
    return max(sgemm_peaks(build, env).values())


def bench_mwb(build, env, m, warmup, iters, threads):
    b, s = m["global_batch_size"], m["seq_length"]
    with tempfile.TemporaryDirectory() as run_dir:
        # FLOPs are the engine's own count (backend/telemetry/flops.h, one formula), over the whole s×s
        # attention matrix as docs/performance.md's earlier figures: 72·T·L·h²·(1 + s/(6h) + V/(12·L·h)).
        cmd = [f"{build}/backend/mwb-train", "--mock-data", "--tokenizer-type", "NullTokenizer", *mwb_flags(m),
               "--mfu-attention-flops", "full",
               "--train-iters", str(warmup + iters), "--log-interval", "1", "--eval-iters", "0",
               "--threads", str(threads), "--run-dir", run_dir]
        _, rss = run_child(cmd, env)
        records = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl")]
        steps = [r for r in records if r["topic"] == "step"]  # metrics.jsonl also holds eval and memory records
        timed = [r["iteration_time_s"] for r in steps][warmup:]
        t = sum(timed) / len(timed)
        flops = json.load(open(f"{run_dir}/run.json"))["derived"]["model_flops_per_iteration"]
        return {"iteration_time_s": t, "tokens_per_sec": b * s / t, "peak_rss_bytes": rss,
                "tracked_peak_bytes": steps[-1]["mem_peak_bytes"], "model_flops": flops}


def bench_torch(env, name, warmup, iters, threads):
    here = os.path.dirname(os.path.abspath(__file__))
    cmd = ["/usr/bin/python3", f"{here}/torch_gpt.py", "--model", name, "--threads", str(threads), "--warmup",
           str(warmup), "--iters", str(iters)]
    out, _ = run_child(cmd, env)
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--quick", action="store_true", help="config S only, fewer iterations")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json")
    args = ap.parse_args()
    results = []
    for pinned in (True, False):
        env = dict(os.environ)
        if pinned:
            env["OPENBLAS_CORETYPE"] = "Haswell"
        else:
            env.pop("OPENBLAS_CORETYPE", None)
            env.pop("OPENBLAS_L2_SIZE", None)
        peak = sgemm_peak(args.build, env)
        for name in SHAPES:
            if args.quick and name != "config S":
                continue
            warmup, iters = (1, 3) if name != "config S" or args.quick else (2, 8)
            m = model(name)
            flops = None
            for engine in ("mwb-train", "PyTorch"):  # mwb-train first: its run.json has the FLOPs of the shape
                r = (bench_mwb(args.build, env, m, warmup, iters, args.threads) if engine == "mwb-train"
                     else bench_torch(env, name, warmup, iters, args.threads))
                flops = r.pop("model_flops", flops)
                r.update({"engine": engine, "shape": name, "openblas": "Haswell" if pinned else "auto",
                          "sgemm_peak_gflops": peak, "gflops": flops / r["iteration_time_s"] / 1e9})
                results.append(r)
                print(f"{name:<11} {r['openblas']:<8} {engine:<9} {r['tokens_per_sec']:8.0f} tok/s "
                      f"{r['iteration_time_s'] * 1e3:9.1f} ms/it {r['gflops']:7.1f} GFLOP/s "
                      f"({100 * r['gflops'] / peak:4.1f}% of sgemm {peak:.0f}) "
                      f"peak RSS {r['peak_rss_bytes'] / 2**20:7.0f} MiB", file=sys.stderr, flush=True)
    print("| model | OpenBLAS kernels | engine | tokens/s | ms/iteration | model GFLOP/s | % of sgemm peak | "
          "peak RSS (MiB) |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(f"| {r['shape']} | {r['openblas']} (sgemm {r['sgemm_peak_gflops']:.0f} GFLOP/s) | {r['engine']} | "
              f"{r['tokens_per_sec']:.0f} | {r['iteration_time_s'] * 1e3:.0f} | {r['gflops']:.1f} | "
              f"{100 * r['gflops'] / r['sgemm_peak_gflops']:.0f}% | {r['peak_rss_bytes'] / 2**20:.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
