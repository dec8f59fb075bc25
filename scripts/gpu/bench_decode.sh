#!/usr/bin/env bash
# Decode benchmark on a CUDA machine, from the source tree (PYTHONPATH=src python3 -m evokernel):
# writes the random Qwen3-0.6B checkpoint if it is missing, then runs
#   evokernel bench decode --suite full   (our engine, gpt-fast-style, HF eager, HF compile,
#                                          vLLM when importable), positions 1 .. 32768
# into $OUT/bench_decode_<suite>.json (+ .csv, + .log with the progress lines and the table).
#
#   scripts/gpu/bench_decode.sh                 the full suite (about 6 minutes on an H200)
#   SUITE=quick scripts/gpu/bench_decode.sh     positions up to 4096 (about 3 minutes)
#   scripts/gpu/bench_decode.sh --baselines evokernel,gptfast    extra flags go to the bench
#
# MODEL (default checkpoints/random-qwen3-0.6b), SUITE (full), MAX_MINUTES (8: no new row starts
# after that, so the file is complete before a 10-minute limit) and PYTHON (python3) override.
# The last line printed is the bench's JSON summary. Exit status: the bench's.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
MODEL=${MODEL:-checkpoints/random-qwen3-0.6b}
SUITE=${SUITE:-full}

if [ ! -f "$MODEL/model.safetensors" ]; then
  "$PY" -m evokernel model random "$MODEL" --preset qwen3-0.6b --seed 0 || exit 1
fi
"$PY" -m evokernel bench decode --model "$MODEL" --suite "$SUITE" --device cuda \
  --out "$OUT/bench_decode_$SUITE.json" --max-minutes "${MAX_MINUTES:-8}" "$@" 2>&1 \
  | tee "$OUT/bench_decode_$SUITE.log"
exit "${PIPESTATUS[0]}"
