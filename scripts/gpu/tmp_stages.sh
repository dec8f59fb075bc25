#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
EK="python3 -m evokernel"
C=/tmp/ck; mkdir -p $C
timeout 280 python3 -m pytest tests/kernels/test_quant_kernels.py tests/model/quant -q -p no:cacheprovider -x 2>&1 | tail -2
$EK model random $C/q06 --preset qwen3-0.6b --seed 0 > /dev/null 2>&1
$EK quantize --model $C/q06 --out $C/q06-int4 --format int4 --head int8 > /dev/null 2>&1
timeout 200 python3 -m evokernel.bench.decode_stages --model $C/q06-int4 --positions 1,1024 --reps 20 \
  --variants default,int4-triton --out $OUT/stages06.json > $OUT/stages06.log 2>&1; echo "stages rc $?"
tail -30 $OUT/stages06.log
