#!/usr/bin/env bash
# GPU correctness checks and benchmarks in one go, for the device machine (one H200; see
# docs/gpu.md). Two halves:
#
#   scripts/gpu-check.sh bundle [BUILD_DIR]   here (CUDA build machine): build mwb-gpu-check and
#       mwb-gpu-bench in BUILD_DIR (default build-gpu-bundle; configured with MWB_NATIVE=OFF, so the
#       binaries run on any x86-64 processor), then gather them and
#       the shared libraries they need that the bare device image lacks (ldd; not glibc, not the CUDA
#       libraries the image has) plus the sources' carried headers for the fallback build, into the
#       git-ignored folder gpu-bundle/ — name it in the device tool's `carry`.
#   scripts/gpu-check.sh [run] [--quick] [--dry-run]   on the device machine: run the CUDA op checks
#       (each in a process of its own: `scripts/gpu-check.sh checks BIN`),
#       then GPT-2 124M (seq 1024) and a 1.3B model (24 layers, hidden 2048, seq 2048) in our engine
#       (mwb-gpu-bench) and in PyTorch (benchmarks/gpu/torch_gpt_gpu.py). Under $OUT (default
#       ./gpu-check-out): op-checks.log, benchmarks.log, results.jsonl and summary.md (the machine, the
#       table and each step's exit code), which is also printed last. PYTHON overrides python3.
#
# If the bundled binaries cannot start there (a library missing), the op checks are rebuilt there
# from sources with nvcc/g++ and the bundle's headers and libraries (fallback_build below).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
bundle="$here/gpu-bundle"

usage() {
    awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"
    exit "${1:-0}"
}

# ---- bundle (on the build machine) ---------------------------------------------------------------
make_bundle() {
    local build="${1:-$here/build-gpu-bundle}"
    # Portable code: -march=native would tune the CPU twins for this machine's processor, which the
    # device machine's may lack (illegal instruction). The bundle's build folder is configured for it.
    if [ ! -f "$build/build.ninja" ] || grep -q '^MWB_NATIVE:BOOL=ON' "$build/CMakeCache.txt"; then
        cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMWB_BUILD_APP=OFF -DMWB_NATIVE=OFF \
            || { echo "gpu-check: configuring $build failed" >&2; exit 1; }
    fi
    grep -q "mwb-gpu-check" "$build/build.ninja" || { echo "gpu-check: $build has no CUDA targets (was nvcc found?)" >&2; exit 1; }
    ninja -C "$build" -j2 mwb-gpu-check mwb-gpu-bench || { echo "gpu-check: build failed" >&2; exit 1; }
    rm -rf "$bundle"
    mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/include"
    cp "$build/tests/kernels/mwb-gpu-check" "$build/benchmarks/gpu/mwb-gpu-bench" "$bundle/bin/"
    # Libraries the device image lacks. glibc's and the CUDA toolkit's own (cudart, cuBLAS, cuBLASLt,
    # NCCL: the image has CUDA 13 and PyTorch's nvidia-* wheels) stay behind: cuBLASLt alone is 540 MB.
    local skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libcuda\.|libcublas|libnccl)'
    for b in "$bundle"/bin/*; do
        ldd "$b" | awk '/=> \// {print $1, $3}' | while read -r name path; do
            echo "$name" | grep -Eq "$skip" || cp -L "$path" "$bundle/lib/$name"
        done
    done
    # Fallback build inputs: the few headers the kernels need beyond the CUDA toolkit's.
    cp -r /usr/include/fmt "$bundle/include/"
    local cblas=/usr/include/x86_64-linux-gnu/openblas-openmp
    [ -f "$cblas/cblas.h" ] || cblas=/usr/include
    cp "$cblas"/cblas.h "$cblas"/openblas_config.h "$bundle/include/" 2>/dev/null || true
    du -sh "$bundle"
    local mb
    mb=$(du -sm "$bundle" | cut -f1)
    [ "$mb" -lt 60 ] || echo "gpu-check: warning: the bundle is ${mb} MiB; carry allows 64 MiB with the working tree" >&2
    echo "gpu-check: bundle ready in $bundle (carry: [\"gpu-bundle\"])"
}

# ---- run (on the device machine) -------------------------------------------------------------------
library_path() {
    # The bundle first, then the image's CUDA toolkit and PyTorch's nvidia-* wheel libraries.
    local dirs="$bundle/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib"
    local wheels
    wheels=$(python3 - 2>/dev/null <<'PY'
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
libs = sorted({os.path.dirname(p) for r in roots for p in glob.glob(os.path.join(r, "nvidia", "**", "lib*.so*"), recursive=True)})
print(":".join(libs))
PY
)
    echo "$dirs${wheels:+:$wheels}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

fallback_build() {
    # The op checks from sources: kernels (CPU twins + CUDA) and the check library, without CMake's
    # dependency discovery (no Qt, MPI or ZeroMQ there). Needs the bundle's headers and libraries.
    local out="$1/fallback" inc="-I$here/kernels/include -I$bundle/include -I/usr/local/cuda/include"
    mkdir -p "$out"
    echo "gpu-check: fallback build of mwb-gpu-check in $out"
    local objs=() f
    for f in "$here"/kernels/src/error.cpp "$here"/kernels/src/tensor.cpp "$here"/kernels/src/ops.cpp \
             "$here"/kernels/cpu/*.cpp "$here"/kernels/cuda/device_probe.cpp "$here"/kernels/cuda/runtime.cpp \
             "$here"/kernels/cuda/gemm.cpp "$here"/tests/kernels/cuda/cuda_op_checks.cpp \
             "$here"/tests/kernels/cuda/mwb_gpu_check.cpp; do
        g++ -std=c++20 -O3 -fopenmp -Wno-stringop-overflow -DMWB_WITH_CUDA=1 -DMWB_GPU_CHECK_NO_MODEL -DFMT_HEADER_ONLY $inc -c "$f" -o "$out/$(basename "$f").o" || return 1
        objs+=("$out/$(basename "$f").o")
    done
    for f in "$here"/kernels/cuda/*.cu; do
        nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 --expt-relaxed-constexpr -DMWB_WITH_CUDA=1 \
            -DFMT_HEADER_ONLY $inc -c "$f" -o "$out/$(basename "$f").o" || return 1
        objs+=("$out/$(basename "$f").o")
    done
    local cudalib
    cudalib=$(dirname "$(find /usr/local/cuda/ -name 'libcublasLt.so*' 2>/dev/null | head -1)")
    g++ -fopenmp "${objs[@]}" -o "$out/mwb-gpu-check" -L"$bundle/lib" -l:libopenblas.so.0 -L"$cudalib" \
        -lcudart -lcublas -lcublasLt || return 1
    echo "$out/mwb-gpu-check"
}

run_step() {  # name seconds command...: runs with a time limit, log in $WORK/name.log, status recorded
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit}s): $*"
    if [ "$dry_run" = 1 ]; then
        echo "dry run" >"$WORK/$name.log"
        return 0
    fi
    timeout "$limit" "$@" >"$WORK/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc" >>"$WORK/status.txt"
    tail -n 25 "$WORK/$name.log"
    return $rc
}

run_all() {
    local quick=$1
    OUT="${OUT:-$here/gpu-check-out}"
    mkdir -p "$OUT"
    # Work files in a scratch folder; $OUT gets at most 8 files (what the device tool brings back).
    WORK=$(mktemp -d)
    : >"$WORK/status.txt"
    : >"$WORK/results.jsonl"
    export LD_LIBRARY_PATH
    LD_LIBRARY_PATH=$(library_path)
    export OMP_NUM_THREADS="${OMP_NUM_THREADS:-16}" PYTHONUNBUFFERED=1
    { date -u; nvidia-smi -L 2>&1; nvcc --version 2>&1 | tail -n 1; "${PYTHON:-python3}" -c 'import torch; print("torch", torch.__version__)' 2>&1; } \
        | tee "$WORK/machine.txt"

    local check="$bundle/bin/mwb-gpu-check" bench="$bundle/bin/mwb-gpu-bench"
    if [ "$dry_run" = 0 ]; then
        if [ ! -x "$check" ] || ldd "$check" | grep -q 'not found'; then
            [ -x "$check" ] && ldd "$check" | grep 'not found' | tee "$OUT/missing-libraries.txt"
            check=$(fallback_build "$WORK" 2>&1 | tee "$OUT/fallback.log" | tail -n 1)
            [ -x "$check" ] || { echo "gpu-check: no runnable mwb-gpu-check (see fallback.log)"; check=""; }
        fi
        if [ ! -x "$bench" ] || ldd "$bench" | grep -q 'not found'; then
            [ -x "$bench" ] && ldd "$bench" | grep 'not found' | tee -a "$OUT/missing-libraries.txt"
            echo "gpu-check: mwb-gpu-bench cannot start here (see missing-libraries.txt): its rows are 'not run'"
            bench=""
        fi
    fi

    # Step limits add up to 520 s, so the whole script ends inside one 600 s device call.
    [ -n "$check" ] && run_step op-checks 120 "$here/scripts/gpu-check.sh" checks "$check"

    # name layers hidden heads seq micro-batch iters limit-mwb limit-torch: GPT-2 124M and a 1.3B model
    # (GPT-3 XL shape).
    local models=("gpt2-124m 12 768 12 1024 8 5 90 70" "gpt-1.3b 24 2048 16 2048 4 3 150 90")
    [ "$quick" = 1 ] && models=("gpt2-124m 12 768 12 1024 8 3 90 70")
    local m name L H A S B I TM TT
    for m in "${models[@]}"; do
        read -r name L H A S B I TM TT <<<"$m"
        local args=(--layers "$L" --hidden "$H" --heads "$A" --seq "$S" --micro-batch "$B" --vocab 50304
                    --iters "$I" --warmup 1 --label "$name")
        [ -n "$bench" ] && { run_step "mwb-$name" "$TM" "$bench" "${args[@]}" --storage bf16; grep '^{' "$WORK/mwb-$name.log" >>"$WORK/results.jsonl"; }
        run_step "torch-$name" "$TT" "${PYTHON:-python3}" "$here/benchmarks/gpu/torch_gpt_gpu.py" "${args[@]}"
        grep '^{' "$WORK/torch-$name.log" >>"$WORK/results.jsonl"
    done
    [ -f "$WORK/op-checks.log" ] && cp "$WORK/op-checks.log" "$OUT/"
    cp "$WORK/results.jsonl" "$OUT/"
    for f in "$WORK"/mwb-*.log "$WORK"/torch-*.log; do
        [ -f "$f" ] && { echo "===== $(basename "$f")"; cat "$f"; }
    done >"$OUT/benchmarks.log"
    summary
    rm -rf "$WORK"
}

summary() {
    python3 - "$WORK" <<'PY' | tee "$OUT/summary.md"
import json, os, sys
work = sys.argv[1]
print("```")
print(open(os.path.join(work, "machine.txt")).read().strip())
print("```")
print()
rows = [json.loads(l) for l in open(os.path.join(work, "results.jsonl")) if l.strip().startswith("{")]
status = open(os.path.join(work, "status.txt")).read().split("\n")
print("| model | engine | tokens/s | model TFLOP/s | MFU (vs measured bf16 peak) | bf16 peak TFLOP/s | peak memory GiB |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    mem = r.get("peak_allocated_bytes")
    print(f"| {r['label']} | {r['engine']} | {r['tokens_per_s']:.0f} | {r['model_tflops']:.1f} | "
          f"{(r['mfu'] or 0) * 100:.1f}% | {r['peak_bf16_tflops']:.0f} | {mem / 2**30 if mem else float('nan'):.1f} |")
print()
print("step exit codes: " + ", ".join(s for s in status if s))
PY
}

# Every check of mwb-gpu-check ($1) in a process of its own: a fault that poisons the CUDA context
# (an illegal address, say) costs that check only, not the ones after it. Exit 0 when all pass.
run_checks() {
    local bin=$1 name rc failed=0 total=0
    printf '%-20s %-6s %-10s %-10s %s\n' check result error tolerance "worst output"
    for name in $("$bin" --list); do
        total=$((total + 1))
        timeout 60 "$bin" "$name" >"$WORK_CHECK" 2>&1
        rc=$?
        [ "$rc" = 77 ] && { cat "$WORK_CHECK"; return 77; }
        if [ "$rc" = 0 ] || [ "$rc" = 1 ]; then
            sed -n '2p' "$WORK_CHECK"
        else
            printf '%-20s %-6s exit %s: %s\n' "$name" CRASH "$rc" "$(tail -n 1 "$WORK_CHECK")"
        fi
        [ "$rc" = 0 ] || failed=$((failed + 1))
    done
    echo "$total checks (one process each), $failed failed"
    [ "$failed" = 0 ]
}

dry_run=0
quick=0
mode=run
build_dir=""
for a in "$@"; do
    case "$a" in
        bundle) mode=bundle ;;
        run) mode=run ;;
        checks) mode=checks ;;
        --quick) quick=1 ;;
        --dry-run) dry_run=1 ;;
        -h|--help) usage 0 ;;
        -*) echo "gpu-check: unknown option $a" >&2; usage 2 ;;
        *) if { [ "$mode" = bundle ] || [ "$mode" = checks ]; } && [ -z "$build_dir" ]; then build_dir=$a
           else echo "gpu-check: unexpected argument $a" >&2; usage 2; fi ;;
    esac
done
case "$mode" in
    bundle) make_bundle ${build_dir:+"$build_dir"} ;;
    checks) WORK_CHECK=$(mktemp); run_checks "$build_dir"; rc=$?; rm -f "$WORK_CHECK"; exit $rc ;;
    run) run_all "$quick" ;;
esac
