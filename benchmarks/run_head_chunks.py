#!/usr/bin/python3
"""Config S of run_llama_benchmark.py with the classifier whole (the default logits_chunk_bytes) and in 4 and
16 chunks of rows, alternating, median iteration times, peak memory, and the sgemm peak in the same run.
Usage: benchmarks/run_head_chunks.py BUILD_DIR [REPS]"""
import json, statistics, subprocess, sys, tempfile, os
BUILD = sys.argv[1]
C = dict(L=6, h=384, a=6, g=2, f=1024, s=256, b=4, v=32000)
def run(chunk, threads, iters=5, warmup=1):
    with tempfile.TemporaryDirectory() as d:
        cmd = [f"{BUILD}/backend/mwb-train", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(C["v"]),
               "--num-layers", str(C["L"]), "--hidden-size", str(C["h"]), "--num-attention-heads", str(C["a"]),
               "--group-query-attention", "--num-query-groups", str(C["g"]), "--swiglu", "--ffn-hidden-size",
               str(C["f"]), "--position-embedding-type", "rope", "--normalization", "RMSNorm",
               "--untie-embeddings-and-output-weights", "--add-bias-linear", "false", "--hidden-dropout", "0",
               "--attention-dropout", "0", "--seq-length", str(C["s"]), "--micro-batch-size", str(C["b"]),
               "--global-batch-size", str(C["b"]), "--train-iters", str(iters), "--lr", "1e-4", "--min-lr", "0",
               "--lr-warmup-iters", "0", "--log-interval", "1", "--eval-interval", "0", "--eval-iters", "0",
               "--threads", str(threads), "--run-dir", d, "--logits-chunk-bytes", str(chunk)]
        subprocess.run(cmd, check=True, capture_output=True)
        recs = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
        steps = [r for r in recs if r["topic"] == "step"]
        peak = max(r.get("mem_peak_bytes", 0) for r in recs)
        return statistics.median(r["iteration_time_s"] for r in steps[warmup:]), steps[-1]["lm_loss"], peak
variants = [268435456, 33554432, 8388608]
res = {v: [] for v in variants}
for rep in range(int(sys.argv[2]) if len(sys.argv) > 2 else 3):
    for v in variants:
        res[v].append(run(v, 2)); print(v, res[v][-1], flush=True)
peak = subprocess.run([f"{BUILD}/benchmarks/mwb-bench-ops", "--sgemm-peak"], capture_output=True, text=True).stdout.strip()
for v in variants:
    t = statistics.median(x[0] for x in res[v])
    print(f"logits_chunk_bytes {v}: median iteration {t:.4f} s (reps {[round(x[0],4) for x in res[v]]}), "
          f"loss {res[v][-1][1]:.6f}, mem_peak_bytes {res[v][-1][2]}")
print("sgemm peak GFLOP/s:", peak.replace(chr(10), "; "))
print("OPENBLAS_CORETYPE=", os.environ.get("OPENBLAS_CORETYPE"), "OPENBLAS_L2_SIZE=", os.environ.get("OPENBLAS_L2_SIZE"))
