#!/usr/bin/env bash
# Runs the same small CPU trainings with two mwb-train binaries and compares them bit for bit: every
# iteration's loss, gradient norm and loss scale (metrics.jsonl, as printed by the JSON writer) and the
# sha256 of every checkpoint shard. For changes that must not move a single bit (storage layout,
# kernel dispatch), e.g. a 16-bit tensor that replaces an fp32 array holding the same 16-bit values.
#   scripts/compare-bits.sh OLD_MWB_TRAIN NEW_MWB_TRAIN [WORK_DIR]
# Exit status 0 when every config matches, 1 otherwise. Needs mpirun for the TP/PP configs.
set -euo pipefail
old="$1"
new="$2"
work="${3:-$(mktemp -d)}"
mkdir -p "$work"

base=(--mock-data --tokenizer-type NullTokenizer --vocab-size 128 --num-layers 4 --hidden-size 64
  --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --global-batch-size 8 --lr 1e-3
  --lr-warmup-iters 0 --train-iters 6 --log-interval 1 --eval-interval 0 --eval-iters 0 --threads 2
  --device cpu --seed 1234 --save-interval 0)
llama=(--group-query-attention --num-query-groups 2 --swiglu --ffn-hidden-size 128
  --position-embedding-type rope --normalization RMSNorm --add-bias-linear false
  --untie-embeddings-and-output-weights)
dropout=(--hidden-dropout 0.1 --attention-dropout 0.1)  # Megatron-LM's defaults, spelled out
no_dropout=(--hidden-dropout 0 --attention-dropout 0)

# name | ranks | flags
configs=(
  "gpt_bf16|1|--bf16"
  "gpt_fp16_no_dropout|1|--fp16 ${no_dropout[*]}"
  "gpt_fp16_selective_dropout|1|--fp16 --recompute-granularity selective ${dropout[*]}"
  "gpt_bf16_full_uniform_dropout|1|--bf16 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2 ${dropout[*]}"
  "gpt_fp16_untied_full_block|1|--fp16 --untie-embeddings-and-output-weights --recompute-granularity full --recompute-method block --recompute-num-layers 1"
  "llama_bf16_no_dropout|1|--bf16 ${llama[*]} ${no_dropout[*]}"
  "llama_fp16_full_block|1|--fp16 ${llama[*]} --recompute-granularity full --recompute-method block --recompute-num-layers 1"
  "llama_bf16_selective_dropout|1|--bf16 ${llama[*]} --recompute-granularity selective ${dropout[*]}"
  "gpt_bf16_tp2_sp_dropout|2|--bf16 --tensor-model-parallel-size 2 --sequence-parallel ${dropout[*]}"
  "llama_fp16_tp2|2|--fp16 ${llama[*]} --tensor-model-parallel-size 2"
  "gpt_bf16_pp2|2|--bf16 --pipeline-model-parallel-size 2 ${dropout[*]}"
  "llama_fp16_pp2_interleaved|2|--fp16 ${llama[*]} --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"
)

run() {  # binary dir ranks flags...
  local bin="$1" dir="$2" ranks="$3"
  shift 3
  rm -rf "$dir"
  local cmd=("$bin" "${base[@]}" "$@" --run-dir "$dir/run" --save "$dir/ckpt")
  if [ "$ranks" -gt 1 ]; then cmd=(mpirun -np "$ranks" "${cmd[@]}"); fi
  "${cmd[@]}" >"$dir.log" 2>&1 || { echo "FAILED to run: ${cmd[*]} (log $dir.log)"; return 1; }
}

steps() {  # the per-iteration numbers as the JSON writer printed them
  grep '"topic":"step"' "$1/run/metrics.jsonl" | grep -o '"\(iteration\|lm_loss\|grad_norm\|loss_scale\)":[^,]*' | tr '\n' ' '
}

shards() {
  (cd "$1/ckpt" && find . -name '*.bin' -print0 | sort -z | xargs -0 sha256sum)
}

status=0
for entry in "${configs[@]}"; do
  IFS='|' read -r name ranks flags <<<"$entry"
  # shellcheck disable=SC2086
  run "$old" "$work/$name.old" "$ranks" $flags || { status=1; continue; }
  # shellcheck disable=SC2086
  run "$new" "$work/$name.new" "$ranks" $flags || { status=1; continue; }
  if [ "$(steps "$work/$name.old")" == "$(steps "$work/$name.new")" ] &&
    [ "$(shards "$work/$name.old")" == "$(shards "$work/$name.new")" ]; then
    echo "same bits  $name: $(grep -c '"topic":"step"' "$work/$name.new/run/metrics.jsonl") iterations, $(shards "$work/$name.new" | wc -l) shards, last $(steps "$work/$name.new" | grep -o '"lm_loss":[^ ]*' | tail -1)"
  else
    echo "DIFFERENT  $name (runs in $work/$name.old and .new)"
    status=1
  fi
done
exit $status
