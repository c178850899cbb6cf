#!/usr/bin/python3
"""The Llama-shaped training benchmark of docs/performance.md: mwb-train and PyTorch side by side on config
S of issue 13 (6 layers, hidden 384, 6 heads in 2 query groups, SwiGLU FFN 1024, RoPE, RMSNorm, no biases,
untied output, vocabulary 32000, sequence 256, micro batch 4, dropout 0 on both sides), same threads, fp32,
with the sgemm peak (median of repeated measurements, mwb-bench-ops --sgemm-peak; the best of the build's
BLAS libraries, each one's reported too) measured in the same run,
with OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE as set in the environment and unset. Iteration times are medians.
Usage: benchmarks/run_llama_benchmark.py BUILD_DIR [--threads N] [--warmup N] [--iters N] [--reps N] [--json OUT]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from run_benchmarks import run_child, sgemm_peaks

# layers, hidden, heads, query groups, ffn (per branch), seq, micro batch, vocab
CONFIG_S = dict(L=6, h=384, a=6, g=2, f=1024, s=256, b=4, v=32000)


def padded(v):
    return (v + 127) // 128 * 128


def bench_mwb(build, env, c, warmup, iters, threads, extra=()):
    """mwb-train on config c: median iteration time, tokens/s, peak RSS, model FLOPs and the last step's
    memory record (bytes per category); `extra` flags are appended (e.g. --bf16)."""
    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [f"{build}/backend/mwb-train", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size",
               str(c["v"]), "--num-layers", str(c["L"]), "--hidden-size", str(c["h"]), "--num-attention-heads",
               str(c["a"]), "--group-query-attention", "--num-query-groups", str(c["g"]), "--swiglu",
               "--ffn-hidden-size", str(c["f"]), "--position-embedding-type", "rope", "--normalization", "RMSNorm",
               "--untie-embeddings-and-output-weights", "--add-bias-linear", "false", "--hidden-dropout", "0",
               "--attention-dropout", "0", "--seq-length", str(c["s"]), "--micro-batch-size", str(c["b"]),
               "--global-batch-size", str(c["b"]), "--train-iters", str(warmup + iters), "--lr", "1e-4",
               "--min-lr", "0", "--lr-warmup-iters", "0", "--log-interval", "1", "--eval-interval", "0",
               "--eval-iters", "0", "--threads", str(threads), "--run-dir", run_dir,
               # the engine's one FLOP count (backend/telemetry/flops.h), over the whole s×s attention
               # matrix as docs/performance.md's earlier figures
               "--mfu-attention-flops", "full", *extra]
        _, rss = run_child(cmd, env)
        steps = [r for r in map(json.loads, open(f"{run_dir}/metrics.jsonl")) if r["topic"] == "step"]
        t = statistics.median(r["iteration_time_s"] for r in steps[warmup:])
        flops = json.load(open(f"{run_dir}/run.json"))["derived"]["model_flops_per_iteration"]
        return {"iteration_time_s": t, "tokens_per_sec": c["b"] * c["s"] / t, "peak_rss_bytes": rss,
                "model_flops": flops, "mem": steps[-1]["mem"]}


def bench_torch(env, c, warmup, iters, threads):
    here = os.path.dirname(os.path.abspath(__file__))
    cmd = ["/usr/bin/python3", f"{here}/torch_llama.py", "--layers", str(c["L"]), "--hidden", str(c["h"]),
           "--heads", str(c["a"]), "--groups", str(c["g"]), "--ffn", str(c["f"]), "--seq", str(c["s"]), "--batch",
           str(c["b"]), "--vocab", str(padded(c["v"])), "--dropout", "0", "--threads", str(threads), "--warmup",
           str(warmup), "--iters", str(iters)]
    out, rss = run_child(cmd, env)
    r = json.loads(out.strip().splitlines()[-1])
    r["peak_rss_bytes"] = rss
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--reps", type=int, default=2, help="runs of each engine per environment (alternated)")
    ap.add_argument("--json")
    args = ap.parse_args()
    flops = None  # the engine's count, from its first run's run.json
    # What the docs/performance.md entry needs besides the table: when, how loaded, how invoked.
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} CPUs: {' '.join(sys.argv)} (OPENBLAS env as set: "
          f"{' '.join(f'{k}={os.environ[k]}' for k in ('OPENBLAS_CORETYPE', 'OPENBLAS_L2_SIZE') if k in os.environ) or 'none'})")
    results = []
    for as_set in (True, False):
        env = dict(os.environ)
        if not as_set:
            env.pop("OPENBLAS_CORETYPE", None)
            env.pop("OPENBLAS_L2_SIZE", None)
        blas = " ".join(f"{k}={env[k]}" for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in env) or "unset"
        # Every BLAS of the build measured; the peak is the best library's (median over the measurements).
        lib_peaks = [sgemm_peaks(args.build, env) for _ in range(3)]
        # Alternate the engines so slow phases of a noisy machine hit both.
        runs = {"mwb-train": [], "PyTorch": []}
        for _ in range(args.reps):
            runs["mwb-train"].append(bench_mwb(args.build, env, CONFIG_S, args.warmup, args.iters, args.threads))
            runs["PyTorch"].append(bench_torch(env, CONFIG_S, args.warmup, args.iters, args.threads))
        flops = runs["mwb-train"][0]["model_flops"]
        lib_peaks.append(sgemm_peaks(args.build, env))
        by_lib = {lib: statistics.median(p[lib] for p in lib_peaks) for lib in lib_peaks[0]}
        peaks = [max(p.values()) for p in lib_peaks]
        peak = statistics.median(peaks)
        print(f"{blas}: sgemm 2048 peaks " + ", ".join(f"{k} {v:.0f}" for k, v in by_lib.items()) + " GFLOP/s",
              file=sys.stderr, flush=True)
        for engine, rs in runs.items():
            t = statistics.median(r["iteration_time_s"] for r in rs)
            r = {"engine": engine, "openblas_env": blas, "iteration_time_s": t, "tokens_per_sec":
                 CONFIG_S["b"] * CONFIG_S["s"] / t, "gflops": flops / t / 1e9, "sgemm_peak_gflops": peak,
                 "sgemm_peaks": peaks, "sgemm_peaks_by_library": by_lib, "peak_rss_bytes": max(x["peak_rss_bytes"] for x in rs)}
            results.append(r)
            print(f"{blas:<40} {engine:<9} {r['tokens_per_sec']:8.0f} tok/s {t * 1e3:8.1f} ms/it "
                  f"{r['gflops']:7.1f} GFLOP/s ({100 * r['gflops'] / peak:4.1f}% of sgemm {peak:.0f})",
                  file=sys.stderr, flush=True)
    print("| OpenBLAS env | engine | tokens/s | ms/iteration | model GFLOP/s | % of sgemm peak | peak RSS (MiB) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(f"| {r['openblas_env']} (sgemm {r['sgemm_peak_gflops']:.0f} GFLOP/s) | {r['engine']} | "
              f"{r['tokens_per_sec']:.0f} | {r['iteration_time_s'] * 1e3:.0f} | {r['gflops']:.1f} | "
              f"{100 * r['gflops'] / r['sgemm_peak_gflops']:.0f}% | {r['peak_rss_bytes'] / 2**20:.0f} |")
    print(f"finished {time.strftime('%H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}; "
          f"model FLOPs {flops / 1e9:.1f} GFLOP per iteration")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "config": CONFIG_S, "model_flops": flops,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
