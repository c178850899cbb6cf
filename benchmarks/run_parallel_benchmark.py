#!/usr/bin/python3
"""Iteration time and communication share of one model under several parallel layouts, with
mwb-train under mpirun on this machine (docs/performance.md). Each rank gets
max(1, cores / ranks) threads; with more ranks than cores the ranks are oversubscribed.
Usage: benchmarks/run_parallel_benchmark.py BUILD_DIR [--iters N]"""
import argparse
import json
import os
import subprocess
import tempfile

# (TP, PP, DP, model chunks per pipeline rank): the last row is the interleaved schedule (3 chunks of
# one layer per rank), whose steady state exchanges messages once per forward + backward pair.
LAYOUTS = [(1, 1, 1, 1), (2, 1, 1, 1), (1, 2, 1, 1), (1, 1, 2, 1), (1, 2, 1, 3)]
# The demo preset's optimizer settings (dropout 0) under this shape, as docs/performance.md measured it.
MODEL = ["--preset", "tiny-cpu-demo", "--num-layers", "6", "--hidden-size", "384", "--num-attention-heads", "6", "--seq-length", "256",
         "--micro-batch-size", "4", "--global-batch-size", "8", "--mock-data", "--tokenizer-type", "NullTokenizer",
         "--vocab-size", "50257", "--lr", "1e-4", "--min-lr", "0", "--lr-warmup-iters", "0", "--log-interval", "1",
         "--eval-interval", "0", "--eval-iters", "0"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
    cores = os.cpu_count()
    print("| layout (TP, PP, DP[, chunks]) | ranks x threads | s/iteration | tokens/s | communication | pipeline wait | "
          "communication share | bytes sent per iteration (max rank) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for tp, pp, dp, chunks in LAYOUTS:
        ranks = tp * pp * dp
        threads = max(1, cores // ranks)
        with tempfile.TemporaryDirectory() as run_dir:
            cmd = [f"{args.build}/backend/mwb-train", *MODEL, "--train-iters", str(args.iters + 1), "--threads",
                   str(threads), "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
                   "--run-dir", run_dir]
            if chunks > 1:
                cmd += ["--num-layers-per-virtual-pipeline-stage", str(6 // (pp * chunks))]
            if ranks > 1:
                cmd = ["mpirun", "-np", str(ranks), *cmd]
            subprocess.run(cmd, env=env, check=True, capture_output=True)
            steps = [json.loads(l) for l in open(f"{run_dir}/metrics.jsonl") if '"topic":"step"' in l][1:]
        t = sum(s["iteration_time_s"] for s in steps) / len(steps)
        tok = sum(s["tokens_per_sec"] for s in steps) / len(steps)
        # The slowest rank's communication (collectives and point-to-point) and its pipeline wait.
        per_rank = {}
        for s in steps:
            for r in s["ranks"]:
                c = per_rank.setdefault(r["rank"], [0.0, 0.0, {}])
                c[0] += r["time"]["communication_s"] / len(steps)
                c[1] += r["time"]["pipeline_bubble_s"] / len(steps)
                for g, v in r["comm"].items():
                    c[2][g] = v["bytes_per_iteration"]
        comm = max(v[0] for v in per_rank.values())
        wait = max(v[1] for v in per_rank.values())
        sent = max(per_rank.values(), key=lambda v: sum(v[2].values()))[2]
        sent_s = ", ".join(f"{g} {b / 2**20:.1f} MiB" for g, b in sent.items() if b > 1024)
        layout = f"({tp}, {pp}, {dp}" + (f", {chunks} chunks)" if chunks > 1 else ")")
        print(f"| {layout} | {ranks} x {threads} | {t:.3f} | {tok:.0f} | {comm:.3f} s | {wait:.3f} s | "
              f"{100 * (comm + wait) / t:.0f}% | {sent_s or '-'} |", flush=True)


if __name__ == "__main__":
    main()
