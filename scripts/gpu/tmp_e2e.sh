#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 150 python3 -m pytest tests/kernels/test_int4_cuda.py -q -p no:cacheprovider -m gpu 2>&1 | tail -2
C=/tmp/ck; mkdir -p $C
t0=$(date +%s)
[ -f $C/b8/config.json ] || python3 -m evokernel model random $C/b8 --preset ${PRESET:-qwen3-8b} --seed 0 > $OUT/rand.log 2>&1 || tail -5 $OUT/rand.log
echo "random $(( $(date +%s) - t0 )) s"
[ -f $C/b8-int4/config.json ] || python3 -m evokernel quantize --model $C/b8 --out $C/b8-int4 --format int4 --head int8 > $OUT/q.log 2>&1 || tail -5 $OUT/q.log
echo "ckpts $(( $(date +%s) - t0 )) s"
timeout ${BT:-360} python3 -m evokernel bench decode --model $C/b8 --quantized $C/b8-int4 --baselines evokernel \
  --positions ${POS:-1,4096} --out $OUT/e2e.json > $OUT/e2e.log 2>&1; echo "bench rc $?"
tail -25 $OUT/e2e.log
