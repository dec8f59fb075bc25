#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 200 python3 -m pytest tests/kernels/test_int4_cuda.py -q -p no:cacheprovider -m gpu -x 2>&1 | tail -3
timeout 300 python3 -m evokernel.bench.quant_kernels --shapes ${SHAPES:-qwen3-8b,qwen3-0.6b} --formats int4 \
    --projections qkv,o_proj,gate_up,down --variants ${VARS:-interleave,cuda,cuda-w16} --reps 20 --out $OUT/k.json > $OUT/k.log 2>&1
python3 - <<'PY'
import json
d=json.load(open(''+__import__("os").environ.get("OUT","/tmp/out")+'/k.json'))
for r in d['results']: print(r['shape'], r['projection'], r['variant'], round(r['us'],2), round(r['pct_floor']))
PY
