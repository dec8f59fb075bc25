#!/usr/bin/env bash
# Everything GPU-side in one call: environment, GPU tests, engine check, evaluator check and
# the evolve benchmark. Runs from the source tree (no install): PYTHONPATH=src python3.
#
#   scripts/gpu_check.sh                      all sections
#   scripts/gpu_check.sh env tests engine     chosen sections, in this order
#
# Sections: env tests engine evaluator evolve, and bench (the decode benchmark's full suite,
# about 6 minutes; not in the default list). Each writes JSON and a log under $OUT
# (./out when unset); one failing section does not stop the others. The last lines printed
# are a short table of every section's figures (scripts/gpu/summary.py).
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(env tests engine evaluator evolve)

run_section() {
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name ==="
  "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "{\"section\": \"$name\", \"rc\": $rc, \"wall_s\": $((SECONDS - t0))}" >> "$OUT/sections.jsonl"
  echo "=== $name: rc=$rc in $((SECONDS - t0)) s ==="
}

for s in "${sections[@]}"; do
  case $s in
    env) run_section env $PY scripts/gpu/env_info.py ;;
    tests) run_section tests $PY -m pytest -m gpu -q -p no:cacheprovider tests \
             --junitxml="$OUT/gpu_tests.xml" ;;
    engine) run_section engine bash scripts/gpu/engine_check.sh ;;
    evaluator) run_section evaluator $PY scripts/gpu/evaluator_check.py ;;
    evolve) run_section evolve $PY -m evokernel.bench.evolve_bench --out "$OUT" ;;
    bench) run_section bench bash scripts/gpu/bench_decode.sh ;;
    *) echo "unknown section $s (env tests engine evaluator evolve bench)"; exit 2 ;;
  esac
done
$PY scripts/gpu/summary.py "$OUT"
