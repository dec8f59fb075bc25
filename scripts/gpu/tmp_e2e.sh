#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
EK="python3 -m evokernel"
timeout 150 python3 -m pytest tests/kernels/test_int4_cuda.py -q -p no:cacheprovider -m gpu 2>&1 | tail -1
C=/tmp/ck; mkdir -p $C
t0=$(date +%s)
if [[ ${SMALL:-1} == 1 ]]; then
  $EK model random $C/q06 --preset qwen3-0.6b --seed 0 > /dev/null 2>&1
  $EK quantize --model $C/q06 --out $C/q06-int4 --format int4 --head int8 > /dev/null 2>&1
  timeout 200 $EK bench decode --model $C/q06 --quantized $C/q06-int4 --baselines evokernel \
    --positions 1,1024,8192 --out $OUT/e2e06.json > $OUT/e2e06.log 2>&1; echo "bench06 rc $?"
  grep -E "^evokernel" $OUT/e2e06.log | tail -6
  $EK verify --model $C/q06-int4 --reference $C/q06 --steps 32 > $OUT/verify06.log 2>&1; echo "verify06 rc $?"; tail -4 $OUT/verify06.log
fi
[ -f $C/b8/config.json ] || $EK model random $C/b8 --preset ${PRESET:-qwen3-8b} --seed 0 > $OUT/rand.log 2>&1 || tail -5 $OUT/rand.log
[ -f $C/b8-int4/config.json ] || $EK quantize --model $C/b8 --out $C/b8-int4 --format int4 --head int8 > $OUT/q.log 2>&1 || tail -5 $OUT/q.log
echo "ckpts $(( $(date +%s) - t0 )) s"
timeout ${BT:-300} $EK bench decode --model $C/b8 --quantized $C/b8-int4 --baselines evokernel \
  --positions ${POS:-1,4096} ${BARGS:-} --out $OUT/e2e.json > $OUT/e2e.log 2>&1; echo "bench rc $?"
grep -E "^evokernel|bench decode" $OUT/e2e.log | tail -12
