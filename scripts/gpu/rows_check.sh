#!/usr/bin/env bash
# The CUDA C++ rows kernel (ops/rows_cuda.py, kernels/cuda/rows_mma.cu) on a CUDA machine in one
# go, from the source tree: its GPU tests (and the build tests), then, on the random Qwen3-0.6B
# checkpoint at $CKPT, the stage breakdown and the whole step (`decode_stages`) at batch 1, 8
# and 32 with the engine's default (the kernel for o_proj and down at 3-16 rows), the Triton
# rows kernels alone (`triton-rows`) and the kernel for every projection and the head
# (`cuda-rows`), and `generate`'s batched throughput with its greedy tokens against each
# prompt alone (scripts/gpu/batch_decode.py). ROWS_VARIANTS sets the variants (default:
# default,triton-rows,cuda-rows), ROWS_BATCHES the batch sizes (default: 1 8 32),
# ROWS_POSITIONS the step's positions (default: 1,1000), ROWS_STAGE the stages' position
# (default: 1000), ROWS_NEW_TOKENS `generate`'s new tokens (default: 64; 0 skips it),
# ROWS_TESTS=0 skips the tests (the CUDA attention's GPU tests run with the kernel's). JSON
# and logs under ${OUT:-out} (stages as rows_stages_b<B>.json); exit 1 if the tests fail.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
CKPT=${CKPT:-/tmp/evokernel-qwen3-0.6b}
variants=${ROWS_VARIANTS:-default,triton-rows,cuda-rows}
read -r -a batches <<< "${ROWS_BATCHES:-1 8 32}"
positions=${ROWS_POSITIONS:-1,1000}
stage=${ROWS_STAGE:-1000}
new_tokens=${ROWS_NEW_TOKENS:-64}

rc=0
[ "${ROWS_TESTS:-1}" = 0 ] || "$PY" -m pytest -m gpu -q -p no:cacheprovider tests/kernels/test_rows_cuda.py \
  tests/ops/test_cuda_build.py tests/kernels/test_decode_kernels.py \
  -k "rows_cuda or cuda_attention or cuda_build" --junitxml="$OUT/rows_tests.xml" || rc=1
[ -f "$CKPT/config.json" ] || "$PY" -m evokernel model random "$CKPT" --preset qwen3-0.6b --seed 0
for b in "${batches[@]}"; do
  echo "--- decode_stages --batch $b"
  "$PY" -m evokernel.bench.decode_stages --model "$CKPT" --batch "$b" --positions "$positions" \
    --stage-position "$stage" --reps 30 --variants "$variants" --out "$OUT/rows_stages_b$b.json"
done
[ "$new_tokens" -gt 0 ] || exit $rc
batch_list=$(IFS=,; echo "${batches[*]}")
echo "--- batch_decode --batches $batch_list"
"$PY" scripts/gpu/batch_decode.py --model "$CKPT" --batches "$batch_list" \
  --new-tokens "$new_tokens" --variants "$variants" --out "$OUT/rows_batch.json"
exit $rc
