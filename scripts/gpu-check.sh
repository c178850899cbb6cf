#!/usr/bin/env bash
# GPU correctness checks and benchmarks in one go, for the device machine (one H200; see
# docs/gpu.md). Two halves:
#
#   scripts/gpu-check.sh bundle [BUILD_DIR]   here (CUDA build machine): build mwb-gpu-check and
#       mwb-gpu-bench in BUILD_DIR (default build-gpu-bundle; configured with MWB_NATIVE=OFF, so the
#       binaries run on any x86-64 processor), then gather them and the shared libraries they need
#       that the bare device image lacks (ldd; not glibc, not the CUDA libraries the image has) plus
#       the carried headers for the fallback build, packed as one xz archive (unpacked it is over the
#       limit), into the git-ignored folder gpu-bundle/ (bundle.tar.xz, manifest.txt) — name it in the
#       device tool's `carry`. Fails when archive + working tree exceed the 64 MiB carry limit. The
#       device run unpacks it in place first (step unpack).
#   scripts/gpu-check.sh sanitize [CHECK...]   on the device machine, a call of its own when time is
#       left: compute-sanitizer's memcheck over op checks (sanitize() below).
#   scripts/gpu-check.sh [run] [--quick] [--dry-run]   on the device machine: the CUDA op checks
#       (each in a process of its own: `scripts/gpu-check.sh checks BIN`), whole training steps eager
#       against a CUDA graph of the step (mwb-gpu-check cuda_graph, step cuda-graph), the attention
#       micro-benchmark (4×16×2048×128 bf16, and Llama-3.2-1B's grouped 4×32×2048×64 with 8 groups)
#       in mwb-gpu-bench (the own kernels; the multi-head shape also on cuDNN, --backend cudnn) and
#       PyTorch SDPA, then GPT-2 124M (seq 1024), a 1.3B GPT (24 layers, hidden
#       2048, seq 2048) and Llama-3.2-1B (its preset, seq 2048), bf16, in mwb-gpu-bench and PyTorch
#       (benchmarks/gpu/torch_gpt_gpu.py), given the same mwb-train flags. Every step is time-boxed;
#       the limits, the fallback build's included, add up to at most GPU_CHECK_BUDGET seconds (default
#       360; the dry run fails when they do not), and a step gets at most the time the budget has left
#       (one with under 10 s left is skipped and says so). Under $OUT (default ./gpu-check-out; at most
#       7 files, the device tool brings back 8): machine.txt (GPU, toolkit, PyTorch, whether the mwb
#       programs find cuDNN), running.log (the running step's output as it is written: what an overrun
#       of the whole call leaves), steps.log (each step's whole log, appended the moment it ends),
#       status.txt, results.jsonl, missing-libraries.txt (only when a bundled program cannot start),
#       summary.md (printed last; its last lines are one table: step, exit, key number). `--dry-run`
#       walks every step here without a GPU: the commands, their limits summed against the budget, the
#       programs they need, the check list; OUT defaults to a temp folder then. PYTHON overrides
#       python3 (PyTorch); MWB_GPU_CHECK and MWB_GPU_BENCH the mwb programs (default
#       gpu-bundle/bin/mwb-gpu-check and gpu-bundle/bin/mwb-gpu-bench). The bundled libraries, then the
#       image's CUDA toolkit, then PyTorch's nvidia-* wheel folders (cuDNN: nvidia/cudnn/lib, which
#       the mwb programs dlopen) are on the library path of the mwb programs only, never of PyTorch,
#       which loads its own cuBLAS/cuDNN/NCCL. NCCL_DEBUG=WARN.
#
# If a bundled program cannot start there: when the image's libstdc++ is older than this machine's,
# the bundle's own (gpu-bundle/lib-cxx) goes first on their path; when a library is still missing,
# mwb-gpu-check is rebuilt there from sources with nvcc/g++ and the bundle's headers and libraries
# (fallback_build below, all translation units at once), as a step of its own inside the budget.
# mwb-gpu-bench has no source fallback (it needs the engine, MPI's headers and more than the budget
# allows to compile): its rows then read "not run".
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
bundle="$here/gpu-bundle"
bundle_archive=bundle.tar.xz
carry_limit_mib=64

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
    # Libraries the device image lacks. glibc's, the driver's and the big CUDA libraries (cuBLAS,
    # cuBLASLt, NCCL, cuDNN: the image has CUDA 13 and PyTorch's nvidia-* wheels) stay behind:
    # cuBLASLt alone is 540 MB, cuDNN hundreds more. cudart is small and goes with the programs.
    local skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libcuda\.|libcublas|libnccl|libcudnn)'
    mkdir -p "$bundle/lib-cxx"
    for b in "$bundle"/bin/*; do
        ldd "$b" | awk '/=> \// {print $1, $3}' | while read -r name path; do
            echo "$name" | grep -Eq "$skip" || cp -L "$path" "$bundle/lib/$name"
            # This compiler's C++ runtime, off the path unless the image's is older (GLIBCXX_... not found).
            case "$name" in libstdc++*|libgcc_s*) cp -L "$path" "$bundle/lib-cxx/$name" ;; esac
        done
    done
    # Fallback build inputs: the few headers the kernels need beyond the CUDA toolkit's.
    cp -r /usr/include/fmt "$bundle/include/"
    local cblas=/usr/include/x86_64-linux-gnu/openblas-openmp
    [ -f "$cblas/cblas.h" ] || cblas=/usr/include
    cp "$cblas"/cblas.h "$cblas"/openblas_config.h "$bundle/include/" 2>/dev/null || true
    # What travels is one xz archive (OpenBLAS's 35 MB and ICU's 30 MB of data compress about 5×:
    # unpacked the bundle is over the carry limit); the device run unpacks it in place (step unpack).
    (cd "$bundle" && find . -type f -printf '%10s %p\n' | sort -k2) >"$build/bundle-manifest.txt"
    tar -C "$bundle" -cf - bin lib lib-cxx include | xz -T2 -6 >"$build/$bundle_archive.tmp" ||
        { echo "gpu-check: packing the bundle failed" >&2; exit 1; }
    rm -rf "$bundle"
    mkdir -p "$bundle"
    mv "$build/$bundle_archive.tmp" "$bundle/$bundle_archive"
    mv "$build/bundle-manifest.txt" "$bundle/manifest.txt"
    echo "gpu-check: unpacked $(awk '{s += $1} END {printf "%.1f MiB", s / 1048576}' "$bundle/manifest.txt") in $(wc -l <"$bundle/manifest.txt") files (gpu-bundle/manifest.txt)"
    check_carry_size
    echo "gpu-check: bundle ready in $bundle (carry: [\"gpu-bundle\"])"
}

# On the device machine: the carried archive unpacked in place (gpu-bundle/bin, lib, lib-cxx, include),
# so that the programs find resources/ beside it as they do here.
unpack_bundle() {
    [ -f "$bundle/$bundle_archive" ] || { echo "gpu-check: no $bundle/$bundle_archive (scripts/gpu-check.sh bundle, then carry gpu-bundle)"; return 1; }
    if command -v xz >/dev/null; then
        xz -dc "$bundle/$bundle_archive" | tar -C "$bundle" -xf - || return 1
    else  # an image without xz-utils: Python's tarfile reads xz too
        "${PYTHON:-python3}" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            "$bundle/$bundle_archive" "$bundle" || return 1
    fi
    echo "gpu-check: unpacked $bundle/$bundle_archive"
}

# What travels to the device machine: the working tree (tracked and untracked-not-ignored files) and
# the carried bundle, together at most 64 MiB.
check_carry_size() {
    local tree_bytes bundle_bytes total_mib
    tree_bytes=$(cd "$here" && git ls-files -z -co --exclude-standard | xargs -0 -r du -cb 2>/dev/null | tail -n 1 | cut -f1)
    bundle_bytes=$(du -sb "$bundle" | cut -f1)
    total_mib=$(( (tree_bytes + bundle_bytes + 1048575) / 1048576 ))
    echo "gpu-check: bundle $(( bundle_bytes / 1048576 )) MiB + working tree $(( tree_bytes / 1048576 )) MiB = ${total_mib} MiB of the ${carry_limit_mib} MiB carry limit"
    if [ "$total_mib" -gt "$carry_limit_mib" ]; then
        echo "gpu-check: too large to travel: shrink the bundle (strip the binaries, drop a library the image has)" >&2
        exit 1
    fi
}

# ---- run (on the device machine) -------------------------------------------------------------------
# PyTorch's nvidia-* wheel library folders (cuDNN, and cuBLAS/NCCL where the toolkit lacks them), found
# through the python that holds PyTorch. The CUDA 13 wheels group the toolkit's libraries in
# nvidia/cu13/lib (cuBLAS, cuBLASLt, cudart, NVRTC); NCCL stays in nvidia/nccl/lib and cuDNN in
# nvidia/cudnn/lib: every folder under nvidia/ that holds a library is taken. The mwb programs dlopen
# cuDNN from there (it is never bundled: hundreds of MB).
torch_wheel_dirs() {
    "${PYTHON:-python3}" - 2>/dev/null <<'PY'
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
libs = sorted({os.path.dirname(p) for r in roots for p in glob.glob(os.path.join(r, "nvidia", "**", "lib*.so*"), recursive=True)})
print(":".join(libs))
PY
}

# The library path of the mwb programs: the bundle first, then the image's CUDA toolkit, then the
# wheels' folders.
mwb_library_path() {
    local dirs="$bundle/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib"
    local wheels
    wheels=$(torch_wheel_dirs)
    echo "$dirs${wheels:+:$wheels}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# The folder of the path $1 (colon-separated) that holds libcudnn.so*, or nothing.
cudnn_dir() {
    local d
    local IFS=:
    for d in $1; do
        compgen -G "$d/libcudnn.so*" >/dev/null && { echo "$d"; return 0; }
    done
    return 1
}

# Runs an mwb program (or a script that runs only mwb programs) with the bundle's libraries: a
# program (env), so that `timeout` can run it.
mwb_env() { env LD_LIBRARY_PATH="$MWB_LIBRARY_PATH" "$@"; }

fallback_build() {
    # mwb-gpu-check from sources: kernels (CPU twins + CUDA) and the check library, without CMake's
    # dependency discovery (no Qt, MPI or ZeroMQ there). Needs the bundle's headers and libraries.
    local out="$1/fallback" inc=(-I"$here/kernels/include" -I"$bundle/include" -I/usr/local/cuda/include)
    mkdir -p "$out"
    echo "gpu-check: fallback build of mwb-gpu-check in $out"
    local srcs=("$here"/kernels/src/error.cpp "$here"/kernels/src/tensor.cpp "$here"/kernels/src/ops.cpp
                "$here"/kernels/src/op_checks.cpp "$here"/kernels/src/cudnn_sdpa_plan.cpp
                "$here"/kernels/cpu/*.cpp "$here"/kernels/cuda/*.cpp "$here"/tests/kernels/cuda/cuda_op_checks.cpp
                "$here"/tests/kernels/cuda/mwb_gpu_check.cpp "$here"/kernels/cuda/*.cu)
    # All translation units at once (16 cores there): one compiler per file.
    local f pids=()
    for f in "${srcs[@]}"; do
        case "$f" in
            *.cu) nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 --expt-relaxed-constexpr \
                      -DMWB_WITH_CUDA=1 -DFMT_HEADER_ONLY "${inc[@]}" -c "$f" -o "$out/$(basename "$f").o" & ;;
            *) g++ -std=c++20 -O3 -fopenmp -Wno-stringop-overflow -DMWB_WITH_CUDA=1 -DMWB_GPU_CHECK_NO_MODEL \
                   -DFMT_HEADER_ONLY "${inc[@]}" -c "$f" -o "$out/$(basename "$f").o" & ;;
        esac
        pids+=($!)
    done
    local p failed=0
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
    [ "$failed" = 0 ] || return 1
    # cuBLAS, cuBLASLt and cuDNN are opened at run time (kernels/cuda/dynamic_library.h): only cudart links.
    local cudalib
    cudalib=$(dirname "$(find /usr/local/cuda/ -name 'libcudart.so*' 2>/dev/null | head -1)")
    g++ -fopenmp "$out"/*.o -o "$out/mwb-gpu-check" -L"$bundle/lib" -l:libopenblas.so.0 -L"$cudalib" \
        -lcudart -ldl || return 1
    echo "$out/mwb-gpu-check"
}

now() { date +%s; }

# run_step NAME LIMIT COMMAND...: COMMAND time-boxed to LIMIT seconds (less when the run's budget
# has less left). Its output goes straight into $OUT/running.log while it runs (so an overrun of the
# whole device call still brings back what the step printed), and the moment it ends it is appended to
# $OUT/steps.log, its JSON lines to $OUT/results.jsonl and "NAME rc=N seconds=S" to $OUT/status.txt.
run_step() {
    local name=$1 limit=$2
    shift 2
    local left=$(( deadline - $(now) ))
    if [ "$dry_run" = 1 ]; then
        planned=$(( planned + limit ))
        echo "== $name (limit ${limit}s; ${planned}s planned of ${budget}s): $*"
        # The program: the first word after `env` and its NAME=VALUE assignments.
        local prog=$1
        if [ "$prog" = env ]; then
            shift
            while [ $# -gt 0 ] && [[ "$1" == *=* ]]; do shift; done
            prog=${1:-env}
        fi
        if command -v "$prog" >/dev/null 2>&1 || [ -x "$prog" ]; then
            echo "   program: $prog"
        else
            echo "   program: $prog (not here: on the device machine from the bundle; mwb-gpu-check also from the fallback build)"
        fi
        echo "$name dry-run" >>"$OUT/status.txt"
        return 0
    fi
    if [ "$left" -lt 10 ]; then
        echo "== $name: skipped (${left}s of the ${budget}s budget left)"
        echo "$name skipped (budget)" >>"$OUT/status.txt"
        return 124
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (limit ${limit}s): $*"
    local t0 rc log="$OUT/running.log"
    t0=$(now)
    echo "===== $name (running, limit ${limit}s): $*" >"$log"
    timeout -k 5 "$limit" "$@" >>"$log" 2>&1
    rc=$?
    local secs=$(( $(now) - t0 ))
    { echo "===== $name: rc=$rc in ${secs}s (limit ${limit}s): $*"; tail -n +2 "$log"; echo; } >>"$OUT/steps.log"
    grep '^{' "$log" | sed "s/^{/{\"step\": \"$name\", /" >>"$OUT/results.jsonl"
    echo "$name rc=$rc seconds=$secs" >>"$OUT/status.txt"
    tail -n 25 "$log" | tail -n +2
    rm -f "$log"
    return $rc
}

# An mwb program that cannot start here (not there, or a library missing: ldd with the mwb library
# path) is rebuilt from sources by the one fallback-build step; its missing libraries go to
# $OUT/missing-libraries.txt. Prints nothing when the program starts.
cannot_start() {
    local prog=$1
    [ -x "$prog" ] || { echo "$prog: not there"; return 0; }
    mwb_env ldd "$prog" 2>&1 | grep 'not found' | sed "s|^|$prog: |" | grep . && return 0
    return 1
}

run_all() {
    local quick=$1
    if [ -z "${OUT:-}" ]; then
        if [ "$dry_run" = 1 ]; then OUT=$(mktemp -d); else OUT="$here/gpu-check-out"; fi
    fi
    mkdir -p "$OUT"
    rm -f "$OUT/steps.log" "$OUT/status.txt" "$OUT/results.jsonl" "$OUT/summary.md" "$OUT/running.log" \
          "$OUT/missing-libraries.txt"
    : >"$OUT/status.txt"
    : >"$OUT/results.jsonl"
    WORK=$(mktemp -d)
    deadline=$(( $(now) + budget ))
    planned=0
    export NCCL_DEBUG=WARN OMP_NUM_THREADS="${OMP_NUM_THREADS:-16}" PYTHONUNBUFFERED=1
    MWB_LIBRARY_PATH=$(mwb_library_path)
    local py="${PYTHON:-python3}" cudnn
    { date -u; echo "budget ${budget}s"; nvidia-smi -L 2>&1; nvcc --version 2>&1 | tail -n 1
      timeout 30 "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
      if cudnn=$(cudnn_dir "$MWB_LIBRARY_PATH"); then echo "cuDNN for the mwb programs: $cudnn (after the bundle)"
      else echo "cuDNN for the mwb programs: not found (no nvidia/cudnn/lib beside $py's PyTorch): their own attention kernels only"; fi
      echo "mwb library path: $MWB_LIBRARY_PATH"; } | tee "$OUT/machine.txt"

    local check="${MWB_GPU_CHECK:-$bundle/bin/mwb-gpu-check}" bench="${MWB_GPU_BENCH:-$bundle/bin/mwb-gpu-bench}"
    if [ "$dry_run" = 1 ]; then
        # The check list from whichever mwb-gpu-check is at hand (it lists without a GPU).
        local lister=$check
        [ -x "$lister" ] || lister="$here/build/tests/kernels/mwb-gpu-check"
        if [ -x "$lister" ]; then
            echo "checks ($lister --list): $(mwb_env "$lister" --list | tr '\n' ' ')"
        else
            echo "checks: no mwb-gpu-check here to list them (build it, or scripts/gpu-check.sh bundle)"
        fi
        for s in torch_attention_gpu.py torch_gpt_gpu.py; do
            if "$py" "$here/benchmarks/gpu/$s" --help >/dev/null 2>&1; then echo "$s --help: ok ($py)"
            else echo "$s --help: fails with $py (PyTorch missing here? PYTHON=/usr/bin/python3)"; fi
        done
        if [ -f "$bundle/manifest.txt" ]; then
            echo "bundle ($bundle/$bundle_archive): $(wc -l <"$bundle/manifest.txt") files, $(awk '{s += $1} END {printf "%.1f MiB", s / 1048576}' "$bundle/manifest.txt") unpacked"
        else
            echo "bundle: none here yet (scripts/gpu-check.sh bundle)"
        fi
        run_step unpack 15 "$here/scripts/gpu-check.sh" unpack
        # Counted whether or not it will be needed: the budget must hold when it is.
        run_step fallback-build "$fallback_limit" "$here/scripts/gpu-check.sh" fallback "$WORK"
    else
        [ -f "$bundle/$bundle_archive" ] && run_step unpack 15 "$here/scripts/gpu-check.sh" unpack
        local missing
        missing=$( { cannot_start "$check"; cannot_start "$bench"; } )
        if echo "$missing" | grep -Eq 'GLIBCXX|CXXABI|GCC_[0-9]'; then
            # The image's C++ runtime is older than the build machine's: the bundle's own first.
            echo "$missing" | tee "$OUT/missing-libraries.txt"
            echo "gpu-check: the image's libstdc++ is too old for the bundle: its own (gpu-bundle/lib-cxx) first"
            MWB_LIBRARY_PATH="$bundle/lib-cxx:$MWB_LIBRARY_PATH"
            missing=$( { cannot_start "$check"; cannot_start "$bench"; } )
        fi
        if [ -n "$missing" ]; then
            echo "$missing" | tee -a "$OUT/missing-libraries.txt"
            run_step fallback-build "$fallback_limit" "$here/scripts/gpu-check.sh" fallback "$WORK"
            cannot_start "$check" >/dev/null && check="$WORK/fallback/mwb-gpu-check"
            cannot_start "$bench" >/dev/null && bench="$WORK/fallback/mwb-gpu-bench"
            cannot_start "$check" >/dev/null && { echo "gpu-check: no runnable mwb-gpu-check (see steps.log)"; check=""; }
            cannot_start "$bench" >/dev/null && { echo "gpu-check: no runnable mwb-gpu-bench (see steps.log): its rows are 'not run'"; bench=""; }
        fi
    fi

    # Before an mwb program: the bundle's libraries, and the presets and GPU catalogue of this tree.
    local lib=(env LD_LIBRARY_PATH="$MWB_LIBRARY_PATH" MWB_RESOURCES_DIR="$here/resources")
    # 39 checks, 4 processes at a time (run_checks). Estimated, not measured: ~1-2 s per process for
    # its CUDA context and cuBLAS, the two cuDNN checks ~10-20 s each (a dozen graphs, which cuDNN may
    # compile with NVRTC when it finalizes them): ~100 s one after another, ~30-40 s four at a time.
    [ -n "$check" ] && run_step op-checks 60 "${lib[@]}" "$here/scripts/gpu-check.sh" checks "$check"
    # Whole training steps eagerly and from a CUDA graph (--enable-cuda-graph), bit for bit: a step of
    # its own. Six runs (fp16, bf16, a bf16 batch ramp; each eager and graphed) of a 2-layer, hidden-64
    # GPT for 12-14 steps: ~80 steps of ~10-30 ms (launches and the step's one host read) and four
    # captures (~50 ms each), plus the process's CUDA context and cuBLAS: ~3-6 s estimated; 25 s.
    [ -n "$check" ] && run_step cuda-graph 25 "${lib[@]}" "$check" cuda_graph

    # The attention core alone: name, then the shape as both programs take it.
    local shapes=("attention-mha --batch 4 --heads 16 --seq 2048 --head-dim 128"
                  "attention-gqa --batch 4 --heads 32 --groups 8 --seq 2048 --head-dim 64")
    [ "$quick" = 1 ] && shapes=("${shapes[0]}")
    local shape name
    for shape in "${shapes[@]}"; do
        read -r name shape <<<"$shape"
        # shellcheck disable=SC2086
        [ -n "$bench" ] && run_step "mwb-$name" 10 "${lib[@]}" "$bench" attention $shape
        # cuDNN's fused attention beside the own kernels, on the multi-head shape (bf16 tensors; the
        # JSON line says which kernels ran, and why, if cuDNN could not)
        # shellcheck disable=SC2086
        [ -n "$bench" ] && [ "$name" = attention-mha ] &&
            run_step "mwb-$name-cudnn" 10 "${lib[@]}" "$bench" attention $shape --backend cudnn
        # shellcheck disable=SC2086
        run_step "torch-$name" 15 "$py" "$here/benchmarks/gpu/torch_attention_gpu.py" $shape
    done

    # name, limit-mwb, limit-torch, then the model as both programs take it (mwb-train's flags; the
    # Llama from its preset, the file torch_gpt_gpu.py reads too): GPT-2 124M, a 1.3B GPT (GPT-3 XL
    # shape) and Llama-3.2-1B, bf16.
    # Limits (mwb, PyTorch): the 1.3B models' ~1.3e9 weights drawn on 16 host cores (~4 s) and
    # uploaded, the 8192^3 peak measurement (~1 s), 4 steps of ~0.3 s at 20 % MFU: ~12 s estimated.
    local models=("gpt2-124m 15 15 --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --micro-batch-size 8 --vocab-size 50304 --iters 5"
                  "gpt-1.3b 30 25 --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --micro-batch-size 4 --vocab-size 50304 --iters 3"
                  "llama-3.2-1b 30 25 --preset llama-3.2-1b --seq-length 2048 --micro-batch-size 4 --iters 3")
    [ "$quick" = 1 ] && models=("${models[0]/--iters 5/--iters 3}")
    local m TM TT rest
    for m in "${models[@]}"; do
        read -r name TM TT rest <<<"$m"
        # shellcheck disable=SC2206
        local args=($rest --bf16 --warmup 1 --label "$name")
        [ -n "$bench" ] && run_step "mwb-$name" "$TM" "${lib[@]}" "$bench" "${args[@]}"
        run_step "torch-$name" "$TT" "$py" "$here/benchmarks/gpu/torch_gpt_gpu.py" "${args[@]}"
    done
    if [ "$dry_run" = 1 ]; then
        echo "dry run into $OUT: ${planned}s of step limits planned (the fallback build's included) of the ${budget}s budget"
        if [ "$planned" -gt "$budget" ]; then
            echo "gpu-check: the steps' limits add up to ${planned}s, over the ${budget}s budget: shorten them" >&2
            summary >/dev/null
            rm -rf "$WORK"
            return 1
        fi
    fi
    summary
    rm -rf "$WORK"
}

summary() {
    "${PYTHON_SUMMARY:-python3}" - "$OUT" <<'PY' | tee "$OUT/summary.md"
import json, os, re, sys
out = sys.argv[1]
print("```")
print(open(os.path.join(out, "machine.txt")).read().strip())
print("```")
print()
rows = {}
for line in open(os.path.join(out, "results.jsonl")):
    if line.strip().startswith("{"):
        r = json.loads(line)
        rows[r["step"]] = r
status = [s.split(" ", 1) for s in open(os.path.join(out, "status.txt")).read().split("\n") if s]
checks = None
log = os.path.join(out, "steps.log")
if os.path.exists(log):
    m = re.findall(r"^(\d+) checks \(one process each[^)]*\), (\d+) failed", open(log).read(), re.M)
    if m:
        checks = f"{int(m[-1][0]) - int(m[-1][1])} of {m[-1][0]} passed"


def figures(r):
    if r.get("label") == "attention":
        return (f"fwd {r['fwd_tflops']:.1f} TFLOP/s ({r['fwd_ms']:.2f} ms), "
                f"bwd {r['bwd_tflops']:.1f} TFLOP/s ({r['bwd_ms']:.2f} ms)")
    mem = r.get("peak_allocated_bytes")
    return (f"MFU {(r.get('mfu_h200') or 0) * 100:.1f}% of {r.get('h200_peak_tflops', 0):.0f} (H200 bf16 dense), "
            f"{(r['mfu'] or 0) * 100:.1f}% of {r['peak_bf16_tflops']:.0f} measured; {r['tokens_per_s']:.0f} tokens/s, "
            f"{r['model_tflops']:.1f} TFLOP/s, peak {mem / 2**30 if mem else float('nan'):.1f} GiB")


def what(step, r):
    if r and r.get("label") == "attention":
        g = f" (G {r['groups']})" if r["groups"] != r["heads"] else ""
        k = r.get("kernels", "")
        ran = "" if r.get("engine") != "mwb" else " (cuDNN)" if k.startswith("cuDNN") else " (own kernels)"
        return f"attention {r['batch']}×{r['heads']}{g}×{r['seq']}×{r['head_dim']}{ran}"
    return step.split("-", 1)[1] if "-" in step else step


print("| step | what | exit | result |")
print("| --- | --- | --- | --- |")
for step, st in status:
    r = rows.get(step)
    if step == "op-checks":
        result = checks or "no summary line (see steps.log)"
    elif step == "fallback-build":
        result = "built" if st.startswith("rc=0") else "not built (see steps.log)"
    elif step == "unpack":
        result = "unpacked" if st.startswith("rc=0") else "not unpacked (see steps.log)"
    elif step == "cuda-graph":
        result = "bit-identical to eager" if st.startswith("rc=0") else "failed (see steps.log)"
    elif r:
        result = figures(r)
    else:
        result = "not measured (see steps.log)"
    name = {"op-checks": "CUDA ops vs CPU twins", "fallback-build": "mwb-gpu-check from sources",
            "unpack": "gpu-bundle/bundle.tar.xz",
            "cuda-graph": "training step: eager vs CUDA graph"}.get(step) or what(step, r)
    print(f"| {step} | {name} | {st} | {result} |")
PY
}

# Every check of mwb-gpu-check ($1) in a process of its own: a fault that poisons the CUDA context
# (an illegal address, say) costs that check only, not the ones after it. MWB_CHECK_JOBS of them at a
# time (default 4; 1: one after another): each process's start (CUDA context, cuBLAS load: ~1-2 s)
# outweighs most checks' work, and the GPU holds several small contexts side by side. Each gets
# OMP_NUM_THREADS / jobs cores for its CPU twin and MWB_CHECK_LIMIT seconds (default 45). A check's
# line is printed when it ends (completion order), the count line last. Exit 0 when all pass, 77 when
# a check found no GPU. The checks named after BIN, else every one but cuda_graph. MWB_CHECK_PREFIX:
# a command each check runs under (sanitize's compute-sanitizer); MWB_CHECK_LOG: a file each check's
# whole output is appended to as it ends.
run_checks() {
    local bin=$1 jobs=${MWB_CHECK_JOBS:-4} limit=${MWB_CHECK_LIMIT:-45} name failed=0 total=0 no_gpu=0 dir names
    shift
    local prefix=()
    read -r -a prefix <<<"${MWB_CHECK_PREFIX:-}"
    [ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
    local threads=$(( ${OMP_NUM_THREADS:-16} / jobs ))
    [ "$threads" -ge 1 ] || threads=1
    if [ $# -gt 0 ]; then names="$*"
    else names=$("$bin" --list) || { echo "gpu-check: $bin --list failed"; return 1; }; fi
    dir=$(mktemp -d)
    printf '%-28s %-6s %-10s %-10s %s\n' check result error tolerance "worst output"
    # Prints the lines of the checks that have ended since the last call (their .rc files).
    report() {
        local rc_file n rc
        for rc_file in "$dir"/*.rc; do
            [ -e "$rc_file" ] || continue
            n=$(basename "$rc_file" .rc)
            rc=$(cat "$rc_file")
            mv "$rc_file" "$dir/$n.reported"
            [ -n "${MWB_CHECK_LOG:-}" ] && { echo "===== $n: exit $rc"; cat "$dir/$n.log"; } >>"$MWB_CHECK_LOG"
            if [ "$rc" = 77 ]; then
                [ "$no_gpu" = 1 ] || sed -n '1p' "$dir/$n.log"  # "no CUDA device: why", once
                no_gpu=1
            elif [ "$rc" = 0 ] || [ "$rc" = 1 ]; then
                # The check's own line (after the header; a prefix's banner may come first).
                grep -m1 "^$n " "$dir/$n.log" || sed -n '2p' "$dir/$n.log"
            elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
                printf '%-28s %-6s past its %ss: %s\n' "$n" TIMEOUT "$limit" "$(tail -n 1 "$dir/$n.log")"
            else
                printf '%-28s %-6s exit %s: %s\n' "$n" CRASH "$rc" "$(tail -n 1 "$dir/$n.log")"
            fi
            [ "$rc" = 0 ] || failed=$((failed + 1))
        done
    }
    for name in $names; do
        [ "$name" = cuda_graph ] && continue  # a step of its own (cuda-graph)
        total=$((total + 1))
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
            wait -n
            report
        done
        # The exit status is written to a temporary name and renamed: report() sees whole files only.
        ( OMP_NUM_THREADS=$threads timeout -k 5 "$limit" "${prefix[@]}" "$bin" "$name" >"$dir/$name.log" 2>&1
          echo $? >"$dir/$name.rc.tmp" && mv "$dir/$name.rc.tmp" "$dir/$name.rc" ) &
    done
    wait
    report
    rm -rf "$dir"
    [ "$no_gpu" = 1 ] && return 77
    echo "$total checks (one process each, $jobs at a time), $failed failed"
    [ "$failed" = 0 ]
}

# On the device machine, a call of its own after the run when time is left: compute-sanitizer's
# memcheck over op checks (those named, else the own kernels' checks below), each check in its own
# process under the tool (4 at a time, 120 s each, SANITIZE_BUDGET seconds in all, default 240), to
# find out-of-bounds and misaligned accesses that values compared against the CPU may not show. A
# check the tool faults shows as CRASH with exit 99. Writes $OUT/sanitizer.log (every check's whole
# output) and $OUT/sanitizer.txt (a line per check, the count last).
sanitize() {
    OUT=${OUT:-$here/gpu-check-out}
    mkdir -p "$OUT"
    [ -x "$bundle/bin/mwb-gpu-check" ] || [ ! -f "$bundle/$bundle_archive" ] || unpack_bundle >/dev/null
    local check=${MWB_GPU_CHECK:-$bundle/bin/mwb-gpu-check} tool=${COMPUTE_SANITIZER:-compute-sanitizer} c
    if ! command -v "$tool" >/dev/null; then
        for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
            [ -x "$c" ] && tool=$c && break
        done
    fi
    command -v "$tool" >/dev/null || { echo "gpu-check: no compute-sanitizer (COMPUTE_SANITIZER names it)"; return 1; }
    local names=("$@")
    [ ${#names[@]} -gt 0 ] || names=(elementwise round_to sum_squares gradient_norm embedding norms gelu swiglu rope
                                     dropout_masks dropout_add residual_norm storage_16bit attention_forward
                                     attention_backward attention_tensor_cores attention_gqa_tensor_cores
                                     attention_16bit cached_attention cross_entropy adamw adamw_16bit)
    : >"$OUT/sanitizer.log"
    MWB_LIBRARY_PATH=$(mwb_library_path)
    echo "gpu-check: $tool memcheck over ${#names[@]} checks of $check (${SANITIZE_BUDGET:-240}s at most)"
    MWB_CHECK_PREFIX="$tool --tool memcheck --error-exitcode 99 --print-limit 10" MWB_CHECK_LIMIT=120 \
        MWB_CHECK_LOG="$OUT/sanitizer.log" timeout -k 5 "${SANITIZE_BUDGET:-240}" \
        env LD_LIBRARY_PATH="$MWB_LIBRARY_PATH" MWB_RESOURCES_DIR="$here/resources" NCCL_DEBUG=WARN \
        "$here/scripts/gpu-check.sh" checks "$check" "${names[@]}" | tee "$OUT/sanitizer.txt"
    return "${PIPESTATUS[0]}"
}

dry_run=0
quick=0
mode=run
build_dir=""
names=()
budget=${GPU_CHECK_BUDGET:-360}
fallback_limit=60
for a in "$@"; do
    case "$a" in
        bundle) mode=bundle ;;
        run) mode=run ;;
        checks) mode=checks ;;
        --quick) quick=1 ;;
        --dry-run) dry_run=1 ;;
        -h|--help) usage 0 ;;
        -*) echo "gpu-check: unknown option $a" >&2; usage 2 ;;
        fallback) mode=fallback ;;
        unpack) mode=unpack ;;
        sanitize) mode=sanitize ;;
        *) if { [ "$mode" = bundle ] || [ "$mode" = checks ] || [ "$mode" = fallback ]; } && [ -z "$build_dir" ]; then build_dir=$a
           elif [ "$mode" = checks ] || [ "$mode" = sanitize ]; then names+=("$a")
           else echo "gpu-check: unexpected argument $a" >&2; usage 2; fi ;;
    esac
done
case "$mode" in
    bundle) make_bundle ${build_dir:+"$build_dir"} ;;
    checks) run_checks "$build_dir" "${names[@]}"; exit $? ;;
    sanitize) sanitize "${names[@]}"; exit $? ;;
    fallback) fallback_build "$build_dir" ;;  # a step of run: the folder for the objects
    unpack) unpack_bundle ;;                  # a step of run
    run) run_all "$quick"; exit $? ;;
esac
