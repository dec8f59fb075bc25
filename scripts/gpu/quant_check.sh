#!/usr/bin/env bash
# Quantized decode on a CUDA machine, from the source tree (PYTHONPATH=src python3):
#
#   scripts/gpu/quant_check.sh kernels     each quantized kernel against the bf16 one, per
#                                          projection of Qwen3-0.6B and Qwen3-4B/8B, each
#                                          dequantisation and some warps/tiles, L2-cold, CUDA events,
#                                          medians (bench/quant_kernels.py): about 6 minutes
#   scripts/gpu/quant_check.sh tests       the quantized kernel tests on the GPU (bf16 too)
#                                          and the model/quant tests: about 2 minutes
#   scripts/gpu/quant_check.sh e2e         random Qwen3-0.6B quantized by `evokernel quantize`
#                                          in each format, verify --reference on two of them,
#                                          then two `bench decode --suite full` runs with the
#                                          bf16 model in each: about 9 minutes per bench run
#   scripts/gpu/quant_check.sh quick       the headline formats (heads quantized) of random
#                                          Qwen3-0.6B against bf16 at positions 1, 1,024 and
#                                          8,192, one `bench decode` run: about 3 minutes
#   scripts/gpu/quant_check.sh e2e-4b      the same for a random Qwen3-4B shape (8 GB
#                                          checkpoint; quantized heads only): about 12 minutes
#   scripts/gpu/quant_check.sh e2e-8b      a random Qwen3-8B shape (16 GB checkpoint) as INT4 with
#                                          an INT8 head and with an INT4 head: `decode_stages`
#                                          on the INT4-head one (CUDA attention and kernels
#                                          against the Triton ones, positions 1 and 4,096), then
#                                          one `bench decode` run with bf16 (SUITE_8B: full, or
#                                          a --positions list; SKIP_STAGES=1 skips the stages):
#                                          about 7 minutes with full, checkpoints written
#   scripts/gpu/quant_check.sh launches    `evokernel tune` on random Qwen3-0.6B quantized in
#                                          each of $LAUNCH_FORMATS (default: the headline
#                                          three): each packed projection's launch measured,
#                                          then confirmed end to end per context bucket
#                                          (tune/quant.py): about 3 minutes a format
#   scripts/gpu/quant_check.sh ct          random Qwen3-0.6B quantized by `quantize --layout
#                                          compressed-tensors` (W4A16 g128 with an INT8 head,
#                                          W8A16 per channel, FP8 blocks with an FP8 head):
#                                          `verify` on each, then one `bench decode` at
#                                          positions 1, 1,024 and 8,192 with bf16 and the GPTQ
#                                          INT4 checkpoint of `quick`: about 4 minutes
#   scripts/gpu/quant_check.sh fp8-tensor  random Qwen3-0.6B as per-tensor FP8 in AutoFP8's
#                                          layout with static scales (the tests' independent
#                                          writer, tests/model/quant/published.py): `verify`,
#                                          then `bench decode` at positions 1 and 1,024 with
#                                          bf16: about 2 minutes
#   scripts/gpu/quant_check.sh launch-bench  one `bench decode` run: bf16, the headline
#                                          formats, and each with the pack `launches` wrote
#                                          (in $PACKS, default $OUT) at positions inside each
#                                          engine bucket to 8,192, and 32,000: about 5 minutes
#
# `e2e` needs the engine's fused ops to dispatch packed weights to ops/quant.py. Outputs go to
# $OUT (./out): JSON, CSV and a log per step. CKPT (/tmp/evokernel-quant) holds the
# checkpoints (written when missing). PYTHON (python3) overrides.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
CKPT=${CKPT:-/tmp/evokernel-quant}
EK=("$PY" -m evokernel)

# quantize SRC NAME FLAGS...: $CKPT/NAME from SRC, when missing
quantize() {
  local src=$1 name=$2; shift 2
  [ -f "$CKPT/$name/config.json" ] || "${EK[@]}" quantize --model "$src" --out "$CKPT/$name" "$@"
}

kernels() {
  "$PY" -m evokernel.bench.quant_kernels --shapes qwen3-0.6b \
    --variants default,convert,magic,early,interleave,warps4,warps8,tile64k \
    --out "$OUT/quant_kernels_0.6b.json" \
    2>&1 | tee "$OUT/quant_kernels_0.6b.log"
  "$PY" -m evokernel.bench.quant_kernels --shapes qwen3-4b,qwen3-8b \
    --variants default,convert,magic,early,interleave,warps4 \
    --out "$OUT/quant_kernels_4b_8b.json" 2>&1 | tee "$OUT/quant_kernels_4b_8b.log"
}

tests() {
  "$PY" -m pytest tests/kernels/test_quant_kernels.py tests/model/quant -q -p no:cacheprovider \
    2>&1 | tee "$OUT/quant_tests.log"
}

# e2e_for TAG SRC_FLAGS...: the checkpoints, verify, and the two bench runs
e2e_for() {
  local tag=$1; shift
  local base=$CKPT/$tag-bf16
  [ -f "$base/config.json" ] || "${EK[@]}" model random "$base" "$@" --seed 0 || return 1
  quantize "$base" "$tag-fp8-hfp8" --format fp8 --head fp8
  quantize "$base" "$tag-int8-hint8" --format int8 --head int8
  quantize "$base" "$tag-int4-hint8" --format int4 --head int8
  for q in fp8-hfp8 int4-hint8; do
    "${EK[@]}" verify --model "$CKPT/$tag-$q" --reference "$base" --steps 32 --json \
      2>&1 | tee "$OUT/quant_verify_$tag-$q.log"
  done
  # Run 1: the headline formats (heads quantized) against bf16, in one run.
  "${EK[@]}" bench decode --model "$base" --suite full --baselines evokernel \
    --quantized "$CKPT/$tag-fp8-hfp8" --quantized "$CKPT/$tag-int8-hint8" \
    --quantized "$CKPT/$tag-int4-hint8" --max-minutes 9 \
    --out "$OUT/quant_bench_$tag.json" 2>&1 | tee "$OUT/quant_bench_$tag.log"
}

quick() {
  local base=$CKPT/q06-bf16
  [ -f "$base/config.json" ] || "${EK[@]}" model random "$base" --preset qwen3-0.6b --seed 0 \
    || return 1
  quantize "$base" q06-fp8-hfp8 --format fp8 --head fp8
  quantize "$base" q06-int8-hint8 --format int8 --head int8
  quantize "$base" q06-int4-hint8 --format int4 --head int8
  "${EK[@]}" bench decode --model "$base" --positions 1,1024,8192 --baselines evokernel \
    --quantized "$CKPT/q06-fp8-hfp8" --quantized "$CKPT/q06-int8-hint8" \
    --quantized "$CKPT/q06-int4-hint8" --out "$OUT/quant_bench_quick.json" \
    2>&1 | tee "$OUT/quant_bench_quick.log"
}

# ct: compressed-tensors checkpoints (the layout llm-compressor writes) through the CUDA path
ct() {
  local base=$CKPT/q06-bf16 name
  [ -f "$base/config.json" ] || "${EK[@]}" model random "$base" --preset qwen3-0.6b --seed 0 \
    || return 1
  local L=(--layout compressed-tensors)
  quantize "$base" q06-ct-w4a16-hint8 --format int4 --head int8 "${L[@]}"
  quantize "$base" q06-ct-w8a16 --format int8 --group-size -1 "${L[@]}"
  quantize "$base" q06-ct-fp8-hfp8 --format fp8 --head fp8 "${L[@]}"
  quantize "$base" q06-int4-hint8 --format int4 --head int8
  for name in q06-ct-w4a16-hint8 q06-ct-w8a16 q06-ct-fp8-hfp8; do
    "${EK[@]}" verify --model "$CKPT/$name" --device cuda --reference "$base" \
      2>&1 | tee "$OUT/verify_$name.log" | tail -3
  done
  "${EK[@]}" bench decode --model "$base" --positions 1,1024,8192 --baselines evokernel \
    --quantized "$CKPT/q06-ct-w4a16-hint8" --quantized "$CKPT/q06-int4-hint8" \
    --quantized "$CKPT/q06-ct-w8a16" --quantized "$CKPT/q06-ct-fp8-hfp8" \
    --out "$OUT/quant_bench_ct.json" 2>&1 | tee "$OUT/quant_bench_ct.log"
}

# fp8-tensor: per-tensor FP8 as AutoFP8 writes it, with static activation scales (`quantize
# --layout autofp8` writes the dynamic variant only)
fp8-tensor() {
  local base=$CKPT/q06-bf16 q=$CKPT/q06-autofp8-static
  [ -f "$base/config.json" ] || "${EK[@]}" model random "$base" --preset qwen3-0.6b --seed 0 \
    || return 1
  if [ ! -f "$q/config.json" ]; then
    PYTHONPATH=$PWD/tests/model/quant:$PYTHONPATH "$PY" -c "from pathlib import Path
from published import write_fp8_tensor
write_fp8_tensor(Path('$base'), Path('$q'), 'autofp8', static=True)" || return 1
  fi
  "${EK[@]}" verify --model "$q" --device cuda --reference "$base" 2>&1 \
    | tee "$OUT/verify_q06-autofp8-static.log" | tail -3
  "${EK[@]}" bench decode --model "$base" --positions 1,1024 --baselines evokernel \
    --quantized "$q" --out "$OUT/quant_bench_fp8_tensor.json" 2>&1 \
    | tee "$OUT/quant_bench_fp8_tensor.log"
}

# launches: tune each quantized checkpoint; the pack's table is the last lines of each log
launches() {
  local base=$CKPT/q06-bf16 name
  [ -f "$base/config.json" ] || "${EK[@]}" model random "$base" --preset qwen3-0.6b --seed 0 \
    || return 1
  for name in ${LAUNCH_FORMATS:-fp8-hfp8 int8-hint8 int4-hint8}; do
    case $name in
      fp8-hfp8) quantize "$base" "q06-$name" --format fp8 --head fp8 ;;
      int8-hint8) quantize "$base" "q06-$name" --format int8 --head int8 ;;
      int8g-hint8) quantize "$base" "q06-$name" --format int8 --group-size -1 --head int8 ;;
      int4-hint8) quantize "$base" "q06-$name" --format int4 --head int8 ;;
      *) echo "unknown format $name"; return 1 ;;
    esac
    "${EK[@]}" tune --model "$CKPT/q06-$name" --out "$OUT/pack-q06-$name" \
      2>&1 | tee "$OUT/launches_q06-$name.log" || return 1
  done
}

launch-bench() {
  local base=$CKPT/q06-bf16 packs=${PACKS:-$OUT} name args=()
  [ -f "$base/config.json" ] || "${EK[@]}" model random "$base" --preset qwen3-0.6b --seed 0 \
    || return 1
  quantize "$base" q06-fp8-hfp8 --format fp8 --head fp8
  quantize "$base" q06-int8-hint8 --format int8 --head int8
  quantize "$base" q06-int4-hint8 --format int4 --head int8
  for name in fp8-hfp8 int8-hint8 int4-hint8; do
    args+=(--quantized "$CKPT/q06-$name" --quantized-kernels "$packs/pack-q06-$name")
  done
  "${EK[@]}" bench decode --model "$base" --baselines evokernel "${args[@]}" \
    --positions 1,300,700,1500,3000,6000,32000 --max-minutes 8 \
    --out "$OUT/launch_bench.json" 2>&1 | tee "$OUT/launch_bench.log"
}

e2e() {
  e2e_for q06 --preset qwen3-0.6b || return 1
  local base=$CKPT/q06-bf16
  quantize "$base" q06-fp8 --format fp8
  quantize "$base" q06-int8 --format int8
  quantize "$base" q06-int4 --format int4
  # Run 2: bf16 heads, and the gpt-fast baselines (bf16 and its int8 weight-only model).
  "${EK[@]}" bench decode --model "$base" --suite full --baselines evokernel,gptfast,gptfast_int8 \
    --quantized "$CKPT/q06-fp8" --quantized "$CKPT/q06-int8" --quantized "$CKPT/q06-int4" \
    --max-minutes 9 --out "$OUT/quant_bench_q06_bf16_heads.json" \
    2>&1 | tee "$OUT/quant_bench_q06_bf16_heads.log"
}

e2e-4b() {
  e2e_for q4b --preset qwen3-0.6b --hidden 2560 --intermediate 9728 --layers 36 --heads 32 \
    --kv-heads 8
}

e2e-8b() {
  local base=$CKPT/q8b-bf16 suite=(--suite full)
  [ -f "$base/config.json" ] || "${EK[@]}" model random "$base" --preset qwen3-8b --seed 0 \
    || return 1
  quantize "$base" q8b-int4-hint8 --format int4 --head int8
  quantize "$base" q8b-int4-hint4 --format int4 --head int4
  if [ -z "${SKIP_STAGES:-}" ]; then
    "$PY" -m evokernel.bench.decode_stages --model "$CKPT/q8b-int4-hint4" --positions 1,4096 \
      --variants default,triton-short,int4-triton --out "$OUT/quant_stages_q8b.json" \
      2>&1 | tee "$OUT/quant_stages_q8b.log"
  fi
  [ "${SUITE_8B:-full}" = full ] || suite=(--positions "$SUITE_8B")
  "${EK[@]}" bench decode --model "$base" "${suite[@]}" --baselines evokernel \
    --quantized "$CKPT/q8b-int4-hint8" --quantized "$CKPT/q8b-int4-hint4" --max-minutes 9 \
    --out "$OUT/quant_bench_q8b.json" 2>&1 | tee "$OUT/quant_bench_q8b.log"
}

sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(kernels tests)
status=0
for s in "${sections[@]}"; do
  echo "=== $s ==="
  "$s" || status=1
done
exit $status
