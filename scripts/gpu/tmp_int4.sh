#!/usr/bin/env bash
# temporary: the CUDA 4-bit kernel, tests + per projection + e2e
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
what=${1:-tests,kernels}
if [[ $what == *tests* ]]; then
  timeout 300 python3 -m pytest tests/kernels/test_int4_cuda.py -q -p no:cacheprovider -m gpu -x 2>&1 | tail -15
fi
if [[ $what == *kernels* ]]; then
  timeout 300 python3 -m evokernel.bench.quant_kernels --shapes qwen3-0.6b,qwen3-8b --formats bf16 \
    --projections qkv,o_proj,gate_up,down --variants default --reps 20 --out $OUT/k_bf16.json 2>&1 | grep -v "^$" | tail -30
  timeout 400 python3 -m evokernel.bench.quant_kernels --shapes qwen3-0.6b,qwen3-8b,qwen3-4b --formats int4,int4-asym \
    --projections qkv,o_proj,gate_up,down --variants interleave,cuda,cuda-w4,cuda-w16,cuda-pipe2 --reps 20 --out $OUT/k_int4.json 2>&1 | grep -v "^$" | tail -80
fi
if [[ $what == *e2e8b* ]]; then
  C=/tmp/ck; mkdir -p $C
  t0=$(date +%s)
  python3 -m evokernel model random $C/b8 --preset qwen3-8b --seed 0 > $OUT/rand.log 2>&1 || tail $OUT/rand.log
  python3 -m evokernel quantize --model $C/b8 --out $C/b8-int4 --format int4 --head int8 > $OUT/q.log 2>&1 || tail $OUT/q.log
  echo "ckpts $(( $(date +%s) - t0 )) s"
  timeout 420 python3 -m evokernel bench decode --model $C/b8 --quantized $C/b8-int4 --baselines evokernel \
    --positions ${POS:-1,4096} --out $OUT/e2e8b.json 2>&1 | tail -30
fi
