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
# Each step names the program it runs, the one after `env` and its NAME=VALUE assignments.
grep -q "^   program: .*=" "$log" && fail "a step's program is an environment assignment"
grep -A1 "^== cuda-graph " "$log" | grep -q "^   program: $2" || fail "the cuda-graph step does not name mwb-gpu-check as its program"
grep -A1 "^== mwb-gpt2-124m " "$log" | grep -q "^   program: $3" || fail "the mwb-gpt2-124m step does not name mwb-gpu-bench as its program"
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
# PyTorch's cu130 wheels as they lay their libraries out (cuBLAS, cudart, NVRTC ... grouped in
# nvidia/cu13/lib; NCCL in nvidia/nccl/lib; cuDNN in nvidia/cudnn/lib): each folder on the mwb
# programs' library path, after the bundle and the toolkit, and cuDNN's said to be found.
venv="$out/venv"
/usr/bin/python3 -m venv --without-pip "$venv" || fail "no venv for the wheel layout"
site_dir=$("$venv/bin/python3" -c 'import site; print(site.getsitepackages()[0])')
for f in cu13/lib/libcublas.so.13 cu13/lib/libcublasLt.so.13 cu13/lib/libcudart.so.13 nccl/lib/libnccl.so.2 \
         cudnn/lib/libcudnn.so.9 cudnn/lib/libcudnn_graph.so.9; do
    mkdir -p "$(dirname "$site_dir/nvidia/$f")" && : >"$site_dir/nvidia/$f"
done
OUT="$out/wheels" PYTHON="$venv/bin/python3" MWB_GPU_CHECK=$2 MWB_GPU_BENCH=$3 "$root/scripts/gpu-check.sh" --dry-run \
    >"$out/wheels.txt" 2>&1
path=$(sed -n 's/^mwb library path: //p' "$out/wheels/machine.txt")
for d in cu13/lib nccl/lib cudnn/lib; do
    case ":$path:" in *":$site_dir/nvidia/$d:"*) ;; *) fail "the wheel folder nvidia/$d is not on the mwb library path ($path)" ;; esac
done
case "$path" in *gpu-bundle/lib:*/usr/local/cuda/lib64*"$site_dir"*) ;; *) fail "not bundle, toolkit, wheels in that order: $path" ;; esac
grep -q "^== torch-.*LD_LIBRARY_PATH" "$out/wheels.txt" && fail "a PyTorch step with the wheels' library path"

# The op checks (scripts/gpu-check.sh checks BIN) with a stand-in for mwb-gpu-check: each check in a
# process of its own, MWB_CHECK_JOBS at a time, a line per check (a crash named with its exit status),
# the count line the summary reads, cuda_graph left to its own step, exit 77 when there is no GPU.
fake="$out/fake-check"
cat >"$fake" <<'FAKE'
#!/usr/bin/env bash
if [ "$1" = --list ]; then printf '%s\n' a_pass b_fail c_crash cuda_graph d_pass e_pass f_pass; exit 0; fi
[ -n "${FAKE_NO_GPU:-}" ] && { echo "no CUDA device: fake"; exit 77; }
# How many checks run at once: each marks itself running and counts the marks.
if [ -n "${FAKE_DIR:-}" ]; then
    : >"$FAKE_DIR/run.$1"
    ls "$FAKE_DIR"/run.* | wc -l >"$FAKE_DIR/seen.$1"
    trap 'rm -f "$FAKE_DIR/run.$1"' EXIT
fi
echo "check result error tolerance worst"
case "$1" in
    b_fail) sleep 1; echo "$1 FAIL 1 0 bad"; exit 1 ;;
    c_crash) echo "illegal address"; exit 134 ;;
    cuda_graph) exit 3 ;;
    a_pass) sleep "${FAKE_SLOW:-1}"; echo "$1 PASS 0 0 threads=$OMP_NUM_THREADS"; exit 0 ;;
    *) sleep 1; echo "$1 PASS 0 0 threads=$OMP_NUM_THREADS"; exit 0 ;;
esac
FAKE
chmod +x "$fake"
mkdir -p "$out/marks"
FAKE_DIR="$out/marks" OMP_NUM_THREADS=16 MWB_CHECK_JOBS=4 "$root/scripts/gpu-check.sh" checks "$fake" >"$out/checks.txt" 2>&1
rc=$?
[ "$rc" = 1 ] || { cat "$out/checks.txt"; fail "checks with a failure exit $rc, not 1"; }
for want in "^a_pass PASS .*threads=4$" "^b_fail FAIL " "^c_crash +CRASH +exit 134: illegal address$" \
            "^6 checks \(one process each, 4 at a time\), 2 failed$"; do
    grep -Eq "$want" "$out/checks.txt" || { cat "$out/checks.txt"; fail "checks output lacks /$want/"; }
done
grep -q cuda_graph "$out/checks.txt" && fail "the op checks ran cuda_graph (a step of its own)"
# Five checks sleep 1 s each: run 4 at a time, some overlapped (one after another, each sees only itself).
most=$(cat "$out/marks"/seen.* | sort -n | tail -n 1)
[ "$most" -ge 2 ] && [ "$most" -le 4 ] || fail "at most $most checks ran at once, not 2 to 4"
# A check past its limit is named as such, not as a crash.
MWB_CHECK_LIMIT=3 FAKE_SLOW=8 "$root/scripts/gpu-check.sh" checks "$fake" a_pass f_pass >"$out/slow.txt" 2>&1
grep -Eq "^a_pass +TIMEOUT past its 3s: " "$out/slow.txt" && grep -q "^f_pass PASS " "$out/slow.txt" ||
    { cat "$out/slow.txt"; fail "a check past its limit is not reported as TIMEOUT (or the named checks did not run)"; }
FAKE_NO_GPU=1 "$root/scripts/gpu-check.sh" checks "$fake" >"$out/nogpu.txt" 2>&1
rc=$?
[ "$rc" = 77 ] || fail "checks without a GPU exit $rc, not 77"
[ "$(grep -c 'no CUDA device' "$out/nogpu.txt")" = 1 ] || fail "the no-GPU reason is not said once"
# sanitize: the named checks under compute-sanitizer (a stand-in that prints a banner first and finds
# an error in d_pass), every check's whole output in $OUT/sanitizer.log, a line per check.
cat >"$out/fake-sanitizer" <<'FAKE'
#!/usr/bin/env bash
[ "$1 $2 $3 $4 $5 $6" = "--tool memcheck --error-exitcode 99 --print-limit 10" ] || { echo "bad options: $*"; exit 2; }
shift 6
echo "========= COMPUTE-SANITIZER"
"$@"
rc=$?
if [ "$2" = d_pass ]; then echo "========= ERROR SUMMARY: 1 error"; exit 99; fi
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
FAKE
chmod +x "$out/fake-sanitizer"
OUT="$out/san" COMPUTE_SANITIZER="$out/fake-sanitizer" MWB_GPU_CHECK="$fake" "$root/scripts/gpu-check.sh" sanitize a_pass b_fail d_pass \
    >"$out/sanitize.txt" 2>&1
rc=$?
[ "$rc" = 1 ] || { cat "$out/sanitize.txt"; fail "sanitize with a finding exits $rc, not 1"; }
for want in "^a_pass PASS " "^b_fail FAIL " "^d_pass +CRASH +exit 99: ========= ERROR SUMMARY: 1 error$" \
            "^3 checks \(one process each, 4 at a time\), 2 failed$"; do
    grep -Eq "$want" "$out/san/sanitizer.txt" || { cat "$out/sanitize.txt"; fail "sanitizer.txt lacks /$want/"; }
done
[ "$(grep -c '^===== ' "$out/san/sanitizer.log")" = 3 ] && grep -q "COMPUTE-SANITIZER" "$out/san/sanitizer.log" ||
    fail "sanitizer.log does not hold the three checks' output"
echo "PASS: $(grep -c '^== ' "$log") steps walked; the op checks' runner; sanitize"
