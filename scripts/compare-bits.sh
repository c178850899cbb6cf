#!/usr/bin/env bash
# Runs two mwb-train binaries on the same small CPU configurations (16-bit recipes, GPT and Llama shapes,
# dropout, recompute modes, TP2/PP2/DP2 with the distributed optimizer under mpirun, a resume from a
# checkpoint in both directions) and compares, per configuration, the loss and gradient norm of every
# iteration, the text samples drawn during training (where asked) and the sha256 of every checkpoint
# tensor file. Exit status 1 when any differs. ONLY (a regex) limits the configurations run.
#   scripts/compare-bits.sh OLD_BINARY NEW_BINARY [WORK_DIR]
set -euo pipefail
old="$1" new="$2"
work="${3:-$(mktemp -d)}"
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none

base=(--mock-data --tokenizer-type NullTokenizer --vocab-size 100 --num-layers 4 --hidden-size 32
  --num-attention-heads 4 --seq-length 16 --micro-batch-size 2 --global-batch-size 8 --lr 1e-3
  --lr-warmup-iters 0 --train-iters 6 --log-interval 1 --eval-interval 0 --eval-iters 0 --threads 2
  --device cpu --seed 7)
llama=(--group-query-attention --num-query-groups 2 --swiglu --ffn-hidden-size 64 --position-embedding-type rope
  --normalization RMSNorm --add-bias-linear false --untie-embeddings-and-output-weights)
drop=(--hidden-dropout 0.1 --attention-dropout 0.1)
printf '5 6 7\n40 41\n' >"$work/prompts.txt"
samples="--sample-interval 3 --sample-prompts $work/prompts.txt --sample-max-new-tokens 8"

# name|ranks|flags
configs=(
  "gpt_bf16_dropout_samples|1|--bf16 ${drop[*]} $samples"
  "gpt_fp16_untied_full|1|--fp16 --untie-embeddings-and-output-weights --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
  "gpt_fp16_fp32grads_selective|1|--fp16 --accumulate-allreduce-grads-in-fp32 --recompute-granularity selective ${drop[*]}"
  "llama_bf16_selective|1|--bf16 ${llama[*]} --recompute-granularity selective"
  "llama_fp16_dropout_full_block|1|--fp16 ${llama[*]} ${drop[*]} --recompute-granularity full --recompute-method block --recompute-num-layers 2"
  "gpt_fp32|1|${drop[*]}"
  "gpt_bf16_tp2_sp_samples|2|--bf16 --tensor-model-parallel-size 2 --sequence-parallel ${drop[*]} $samples"
  "llama_fp16_pp2|2|--fp16 ${llama[*]} --pipeline-model-parallel-size 2"
  "gpt_bf16_pp2_tied|2|--bf16 --pipeline-model-parallel-size 2 ${drop[*]}"
  "gpt_bf16_dp2_distopt|2|--bf16 --use-distributed-optimizer ${drop[*]}"
  "llama_fp16_dp2_distopt_samples|2|--fp16 ${llama[*]} --use-distributed-optimizer $samples"
)

run() {  # binary ranks dir flags...
  local bin="$1" ranks="$2" dir="$3"
  shift 3
  rm -rf "$dir"
  mkdir -p "$dir"
  if [ "$ranks" -gt 1 ]; then
    mpirun -np "$ranks" "$bin" "${base[@]}" "$@" --run-dir "$dir/run" --save "$dir/ckpt" >"$dir/log" 2>&1
  else
    "$bin" "${base[@]}" "$@" --run-dir "$dir/run" --save "$dir/ckpt" >"$dir/log" 2>&1
  fi
}

summary() {  # dir: every iteration's loss and grad norm (full precision), the samples, each checkpoint file's sha256
  /usr/bin/python3 - "$1/run" <<'EOF'
import json, os, sys
for line in open(os.path.join(sys.argv[1], "metrics.jsonl")):
    r = json.loads(line)
    if r.get("topic") == "step":
        print("iteration", r["iteration"], repr(r["lm_loss"]), repr(r["grad_norm"]), r["skipped_iterations"])
samples = os.path.join(sys.argv[1], "samples.jsonl")
if os.path.exists(samples):
    for line in open(samples):
        r = json.loads(line)
        print("sample", r["iteration"], r["prompt_index"], json.dumps(r["completion"]))
EOF
  (cd "$1/ckpt" && find . -name '*.bin' | sort | xargs sha256sum)
}

compare() {  # name
  if diff "$work/$1.old.txt" "$work/$1.new.txt" >/dev/null; then
    echo "identical  $1 ($(grep -c '^iteration' "$work/$1.new.txt") iterations, $(grep -c '^sample' "$work/$1.new.txt") samples, $(grep -c '\.bin$' "$work/$1.new.txt") checkpoint files)"
  else
    echo "DIFFERENT  $1"
    diff "$work/$1.old.txt" "$work/$1.new.txt" | head -5
    status=1
  fi
}

status=0
for c in "${configs[@]}"; do
  IFS='|' read -r name ranks flags <<<"$c"
  [[ "$name" =~ ${ONLY:-.} ]] || continue
  # shellcheck disable=SC2086
  run "$old" "$ranks" "$work/$name.old" $flags
  # shellcheck disable=SC2086
  run "$new" "$ranks" "$work/$name.new" $flags
  summary "$work/$name.old" >"$work/$name.old.txt"
  summary "$work/$name.new" >"$work/$name.new.txt"
  compare "$name"
done

[[ "resume" =~ ${ONLY:-.} ]] || exit $status
# Resume: 3 iterations saved, then 3 more loaded from it, each binary from its own checkpoint and from
# the other's (the checkpoint format must load in both directions).
resume=(--bf16 "${drop[@]}" --train-iters 3)
run "$old" 1 "$work/resume.old" "${resume[@]}"
run "$new" 1 "$work/resume.new" "${resume[@]}"
summary "$work/resume.old" >"$work/resume_saved.old.txt"
summary "$work/resume.new" >"$work/resume_saved.new.txt"
compare resume_saved
for pair in "old old" "new new" "old new" "new old"; do
  read -r saver loader <<<"$pair"
  bin="$old"
  [ "$loader" = new ] && bin="$new"
  run "$bin" 1 "$work/resumed.$saver.$loader" --bf16 "${drop[@]}" --load "$work/resume.$saver/ckpt"
  summary "$work/resumed.$saver.$loader" >"$work/resumed.$saver.$loader.txt"
done
for pair in "old.new" "new.old" "new.new"; do
  cp "$work/resumed.old.old.txt" "$work/resume_$pair.old.txt"
  cp "$work/resumed.$pair.txt" "$work/resume_$pair.new.txt"
  compare "resume_$pair"
done
exit $status
