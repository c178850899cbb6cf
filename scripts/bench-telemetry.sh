#!/usr/bin/env bash
# Publishing overhead on training: the same small run with telemetry off, on (nobody listening), on
# with mwb-record following it, and on with a client hammering the snapshot socket (8 requests for the
# whole history always in flight: the server's rate limit must keep it from slowing training),
# alternated, each REPEATS times; prints the median iteration time. Needs python3-zmq for "hammered".
#   scripts/bench-telemetry.sh [BUILD_DIR] [REPEATS] [ITERATIONS] [THREADS]
# The model is tiny on purpose (a few ms per iteration, a step and a memory record every iteration):
# the worst case for relative overhead. docs/performance.md has the numbers.
set -euo pipefail
build="${1:-build}"; repeats="${2:-3}"; iters="${3:-1500}"; threads="${4:-1}"
train="$build/backend/mwb-train"; record="$build/store/mwb-record"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
args=(--preset tiny-cpu-demo --mock-data --tokenizer-type NullTokenizer --vocab-size 100 --num-layers 1 --hidden-size 64
      --num-attention-heads 2 --seq-length 64 --micro-batch-size 4 --global-batch-size 4 --lr-warmup-iters 0
      --log-interval 1 --eval-interval 0 --eval-iters 0 --threads "$threads" --train-iters "$iters")
# Wall time per iteration after the first 100 (warm-up), in ms, from the step records' timestamps:
# everything the training thread does, publishing included.
mean_ms() { /usr/bin/python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"topic":"step"' in l][100:]
print("%.4f" % (1000 * (s[-1]["time"] - s[0]["time"]) / (s[-1]["iteration"] - s[0]["iteration"])))
PY
}
# Keeps 8 "everything since seq 0" requests in flight on the run's snapshot socket until the run ends,
# ignoring retry_after_s (requests the server then leaves unanswered are re-sent after 200 ms); prints
# how many pages (and bytes) and rate_limited refusals it got.
hammer() { /usr/bin/python3 - "$1" <<'PY'
import json, os, sys, time, zmq
run = sys.argv[1]
while not os.path.exists(run + "/telemetry.json"): time.sleep(0.01)
time.sleep(0.05)
info = json.load(open(run + "/telemetry.json"))
s = zmq.Context().socket(zmq.DEALER)
s.connect(info["snapshot"])
req = json.dumps({"schema": "mwb.snapshot/1", "since": 0}).encode()
pages = limited = size = 0
s.RCVTIMEO = 200
start = time.time()
def ended():
    try: return '"run.end"' in open(run + "/events.jsonl").read()
    except FileNotFoundError: return False
while not ended():
    for _ in range(8): s.send(req)
    while True:
        try: frames = s.recv_multipart()
        except zmq.Again: break                   # unanswered (rate-limited peer): send 8 more
        if json.loads(frames[0]).get("ok"):
            pages += 1
            size += sum(len(f) for f in frames)
        else: limited += 1
        s.send(req)
t = time.time() - start
print(f"hammer: {pages} pages ({size / t / 2**20:.1f} MiB/s), {limited} rate_limited in {t:.1f} s", file=sys.stderr)
PY
}
modes=(off on recorded)
/usr/bin/python3 -c "import zmq" 2>/dev/null && modes+=(hammered)
declare -A results
for r in $(seq "$repeats"); do
  for mode in "${modes[@]}"; do
    dir="$work/$mode-$r"
    case $mode in
      off) "$train" "${args[@]}" --run-dir "$dir" --telemetry-endpoint "" > /dev/null ;;
      on) "$train" "${args[@]}" --run-dir "$dir" > /dev/null ;;
      recorded)
        "$record" --quiet --until-end --store "$work/h-$r.sqlite" "$dir" & rec=$!
        "$train" "${args[@]}" --run-dir "$dir" > /dev/null
        wait $rec ;;
      hammered)
        hammer "$dir" & ham=$!
        "$train" "${args[@]}" --run-dir "$dir" > /dev/null
        wait $ham ;;
    esac
    results[$mode]+="$(mean_ms "$dir") "
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
off=$(echo "${results[off]}" | median)
echo "iteration time, median of $repeats runs of $iters iterations ($threads thread(s)), ms:"
for mode in "${modes[@]}"; do
  m=$(echo "${results[$mode]}" | median)
  printf "  telemetry %-9s %8s ms  (%+.2f%%)   runs: %s\n" "$mode" "$m" "$(echo "($m - $off) / $off * 100" | bc -l)" "${results[$mode]}"
done
