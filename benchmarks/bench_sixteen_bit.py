#!/usr/bin/python3
"""Real 16-bit storage on the CPU, measured: mwb-train on config S (run_llama_benchmark.py's Llama shape)
with --bf16 (or --fp16), two builds side by side (e.g. main's and a branch's), alternated, the sgemm
peak measured in the same run; per build the median iteration time and the tracked memory per category
(peak bytes, the last step's record) and the peak RSS.
Usage: benchmarks/bench_sixteen_bit.py BUILD_A BUILD_B [--threads N] [--warmup N] [--iters N] [--reps N] [--fp16]"""
import argparse
import os
import statistics
import sys
import time

from run_benchmarks import sgemm_peak
from run_llama_benchmark import CONFIG_S, bench_mwb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2, help="runs of each build (alternated)")
    ap.add_argument("--fp16", action="store_true", help="--fp16 instead of --bf16")
    args = ap.parse_args()
    flag = "--fp16" if args.fp16 else "--bf16"
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} CPUs: {' '.join(sys.argv)} (OPENBLAS env as set: "
          f"{' '.join(f'{k}={os.environ[k]}' for k in ('OPENBLAS_CORETYPE', 'OPENBLAS_L2_SIZE') if k in os.environ) or 'none'})")
    env = dict(os.environ)
    peaks = [sgemm_peak(args.builds[0], env)]
    runs = {b: [] for b in args.builds}
    for _ in range(args.reps):
        for b in args.builds:
            runs[b].append(bench_mwb(b, env, CONFIG_S, args.warmup, args.iters, args.threads, (flag,)))
    peaks.append(sgemm_peak(args.builds[0], env))
    cats = sorted(runs[args.builds[0]][0]["mem"]["by_category"])
    print(f"| build | ms/iteration | tokens/s | " + " | ".join(f"{c} peak (MiB)" for c in cats) +
          " | tracked peak (MiB) | peak RSS (MiB) |")
    print("| --- | ---: | ---: | " + " | ".join("---:" for _ in cats) + " | ---: | ---: |")
    for b, rs in runs.items():
        t = statistics.median(r["iteration_time_s"] for r in rs)
        mem = rs[-1]["mem"]
        print(f"| {b} | {t * 1e3:.0f} | {CONFIG_S['b'] * CONFIG_S['s'] / t:.0f} | " +
              " | ".join(f"{mem['by_category'][c]['peak'] / 2**20:.2f}" for c in cats) +
              f" | {mem['peak'] / 2**20:.2f} | {max(r['peak_rss_bytes'] for r in rs) / 2**20:.0f} |")
    print(f"sgemm peak {statistics.median(peaks):.0f} GFLOP/s (before and after: {peaks[0]:.0f}, {peaks[1]:.0f}); "
          f"finished {time.strftime('%H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
