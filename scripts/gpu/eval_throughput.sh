#!/usr/bin/env bash
# Evaluator throughput and false rejections on one GPU, from the source tree (PYTHONPATH=src):
#   evokernel bench eval --sweep   every program of both tasks' declared knob spaces
#                                  (decode_linear 48, gqa_decode_attention 54: all honest),
#                                  interleaved, through the evaluator with its default settings
#                                  (50 timed rounds, profiler pass, hidden scenarios, every check)
#                                  and its default evaluations in flight, as `evolve` runs them
# into $OUT/eval_throughput.json (+ .log with one progress line per evaluation).
#
#   scripts/gpu/eval_throughput.sh                     about 6 minutes on an H100
#   MAX_MINUTES=3 scripts/gpu/eval_throughput.sh       start no evaluation after 3 minutes
#   scripts/gpu/eval_throughput.sh --promote-above 1   extra flags go to the bench
#
# MAX_MINUTES (default 5: evaluations still running then finish, so the whole script fits in
# about 6 minutes; programs not started are counted as "left") and PYTHON (python3) override.
# Prints last a short table: evaluations per minute, the mean phase breakdown per evaluation
# (startup = waiting for a ready worker, load, correctness, timing, of which wait = waiting for
# the GPU and held = holding it), the false rejections (goal 0) and each rejected program.
# Exit status: the bench's.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}

"$PY" -m evokernel bench eval --sweep --device cuda --max-minutes "${MAX_MINUTES:-5}" \
  --out "$OUT/eval_throughput.json" "$@" 2>&1 | tee "$OUT/eval_throughput.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] && "$PY" -c '
import json, sys
from evokernel.bench.eval_bench import format_table
print(format_table(json.load(open(sys.argv[1]))))' "$OUT/eval_throughput.json"
exit "$rc"
