#!/usr/bin/env bash
# scripts/gpu-check.sh --dry-run walks every step of the device run here, without a GPU: each step
# named with its limit, the op checks listed by this build's mwb-gpu-check (the Llama ones included),
# the bundled libraries on the library path of the mwb programs only, the steps' limits summed inside
# the budget (and a run refused when they are not), whether cuDNN will be found, and the files it
# leaves in $OUT (status per step, summary ending in its table).
# usage: test_gpu_check_dry_run.sh REPO_ROOT MWB_GPU_CHECK MWB_GPU_BENCH
set -u
root=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
log="$out/dry-run.txt"
OUT="$out/run" MWB_GPU_CHECK=$2 MWB_GPU_BENCH=$3 GPU_CHECK_BUDGET=360 "$root/scripts/gpu-check.sh" --dry-run >"$log" 2>&1
rc=$?
fail() { echo "FAIL: $*"; cat "$log"; exit 1; }
[ "$rc" = 0 ] || fail "exit status $rc"
steps="unpack fallback-build op-checks cuda-graph mwb-attention-mha mwb-attention-mha-cudnn torch-attention-mha mwb-attention-gqa \
torch-attention-gqa \
mwb-gpt2-124m torch-gpt2-124m mwb-gpt-1.3b torch-gpt-1.3b mwb-llama-3.2-1b torch-llama-3.2-1b"
for step in $steps; do
    grep -q "^== $step (limit [0-9]*s" "$log" || fail "step $step not walked"
    grep -q "^$step dry-run$" "$out/run/status.txt" || fail "step $step missing from status.txt"
done
for check in swiglu rope attention_gqa attention_gqa_tensor_cores attention_16bit attention_cudnn_16bit deterministic model cuda_graph; do
    grep -q "^checks (.*--list):.* $check " "$log" || fail "check $check not listed"
done
# mwb programs get the bundle's libraries, PyTorch never does.
grep "^== mwb-" "$log" | grep -vq "LD_LIBRARY_PATH=.*gpu-bundle/lib" && fail "an mwb step without the bundle's libraries"
grep "^== torch-" "$log" | grep -q "LD_LIBRARY_PATH" && fail "a PyTorch step with the bundle's libraries"
for side in "mwb-attention-mha .*attention" "torch-attention-mha .*torch_attention_gpu.py"; do
    grep -q "^== $side --batch 4 --heads 16 --seq 2048 --head-dim 128$" "$log" ||
        fail "the attention micro-benchmark ($side) is not 4×16×2048×128"
done
grep -q "^== mwb-attention-mha-cudnn .*attention --batch 4 --heads 16 --seq 2048 --head-dim 128 --backend cudnn$" "$log" ||
    fail "the cuDNN attention step is not 4×16×2048×128 with --backend cudnn"
# The same Llama-3.2-1B on both sides: the preset file both programs read, bf16.
for side in mwb torch; do
    grep -q "^== $side-llama-3.2-1b .*--preset llama-3.2-1b --seq-length 2048 --micro-batch-size 4 .*--bf16" "$log" ||
        fail "$side-llama-3.2-1b is not the Llama-3.2-1B preset at seq 2048, micro batch 4, bf16"
done
# Every step's limit is summed (the fallback build's too) and fits the budget.
planned=$(sed -n 's/^dry run into .*: \([0-9]*\)s of step limits planned.* of the 360s budget$/\1/p' "$log")
[ -n "$planned" ] && [ "$planned" -le 360 ] || fail "no planned total inside the 360 s budget"
sum=$(awk '/^== / && match($0, /\(limit [0-9]+s;/) {s += substr($0, RSTART + 7, RLENGTH - 9)} END {print s}' "$log")
[ "$sum" = "$planned" ] || fail "the limits add up to $sum, the dry run says $planned"
# A budget the limits do not fit fails the dry run, saying so.
OUT="$out/small" MWB_GPU_CHECK=$2 MWB_GPU_BENCH=$3 GPU_CHECK_BUDGET=$((planned - 1)) "$root/scripts/gpu-check.sh" --dry-run \
    >"$out/small.txt" 2>&1 && fail "a budget of $((planned - 1)) s passed the dry run"
grep -q "add up to ${planned}s, over the $((planned - 1))s budget" "$out/small.txt" || fail "the over-budget dry run does not say why"
# What the carried bundle holds is said (or that there is none here yet).
grep -Eq "^bundle( \(.*\): [0-9]+ files, [0-9.]+ MiB unpacked|: none here yet)" "$log" || fail "the bundle is not described"
# Whether the mwb programs will find cuDNN (after the bundle) is said.
grep -q "^cuDNN for the mwb programs: " "$out/run/machine.txt" || fail "machine.txt does not say whether cuDNN is found"
[ ! -e "$out/run/running.log" ] || fail "running.log left behind"
# The summary ends in one table, a row per step in run order.
rows=$(awk '/^\| step \| what \| exit \| result \|$/ {t = 1; next} t && /^\| --- /{next} t {print $2}' "$out/run/summary.md" | tr '\n' ' ')
[ "$rows" = "$(echo $steps) " ] || fail "summary table rows: '$rows'"
tail -n 1 "$out/run/summary.md" | grep -q "^| torch-llama-3.2-1b " || fail "summary.md does not end in its table"
[ -s "$out/run/machine.txt" ] || fail "no machine.txt"
echo "PASS: $(grep -c '^== ' "$log") steps walked"
