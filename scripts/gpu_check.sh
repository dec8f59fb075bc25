#!/usr/bin/env bash
# Everything GPU-side in one call: environment, GPU tests, engine check, evaluator check and
# the evolve benchmark. Runs from the source tree (no install): PYTHONPATH=src python3.
#
#   scripts/gpu_check.sh                      all sections
#   scripts/gpu_check.sh env tests engine     chosen sections, in this order
#
# Sections: env tests engine stages sync evaluator evolve (sync: what a dependency between
# decode stages costs, bench/sync_costs.py), and, not in the default list: families (verify +
# bench per model family, scripts/gpu/families_check.sh), batch (batched decode throughput and
# greedy agreement, scripts/gpu/batch_decode.py), serve (`evokernel bench serve`, defaults, with
# SERVE_ARGS as its --serve-args; needs the serve extra importable: Starlette, uvicorn,
# pydantic, prometheus-client, httpx), trees (this tree's engine against $OLD's,
# scripts/gpu/trees_check.sh), persistent (the experimental persistent decode step against the
# per-layer one, scripts/gpu/persistent_check.py), rows (the CUDA rows kernel's GPU tests, stages
# and batched throughput, scripts/gpu/rows_check.sh), and of about 6 minutes each: bench (the decode benchmark's full suite) and throughput (the
# evaluator's throughput and false rejections over both tasks' knob spaces), and layer (the
# decode-layer search and kernel packs, scripts/gpu/layer_check.sh: longer than one call).
# Each writes JSON and a log under $OUT (./out when unset); one failing section does not stop
# the others. The last lines printed
# are a short table of every section's figures (scripts/gpu/summary.py). The random Qwen3-0.6B
# checkpoint the engine sections use is written once to $CKPT (default
# /tmp/evokernel-qwen3-0.6b).
# TESTS selects the GPU test paths (default: tests), TESTS_MARK their marker expression
# (default: gpu, about 9 minutes on an H200; "gpu and not slow" about 4), STAGE_VARIANTS the
# decode_stages launch variants (default: all of them), e.g. STAGE_VARIANTS=default,tickets.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
export CKPT=${CKPT:-/tmp/evokernel-qwen3-0.6b}
sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(env tests engine stages sync evaluator evolve)

checkpoint() {
  [ -f "$CKPT/config.json" ] || $PY -m evokernel model random "$CKPT" --preset qwen3-0.6b --seed 0
}

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
  # shellcheck disable=SC2086  # TESTS and STAGE_VARIANTS split on purpose
  case $s in
    env) run_section env $PY scripts/gpu/env_info.py ;;
    tests) run_section tests $PY -m pytest -m "${TESTS_MARK:-gpu}" -q -p no:cacheprovider ${TESTS:-tests} \
             --junitxml="$OUT/gpu_tests.xml" ;;
    engine) checkpoint && run_section engine bash scripts/gpu/engine_check.sh ;;
    stages) checkpoint && run_section stages $PY -m evokernel.bench.decode_stages \
              --model "$CKPT" --out "$OUT/decode_stages.json" \
              ${STAGE_VARIANTS:+--variants $STAGE_VARIANTS} ;;
    evaluator) run_section evaluator $PY scripts/gpu/evaluator_check.py ;;
    sync) run_section sync $PY -m evokernel.bench.sync_costs --out "$OUT/sync_costs.json" ;;
    evolve) run_section evolve $PY -m evokernel.bench.evolve_bench --out "$OUT" ;;
    bench) checkpoint && MODEL=$CKPT run_section bench bash scripts/gpu/bench_decode.sh ;;
    throughput) run_section throughput bash scripts/gpu/eval_throughput.sh ;;
    layer) run_section layer bash scripts/gpu/layer_check.sh ;;
    families) run_section families bash scripts/gpu/families_check.sh ;;
    batch) checkpoint && run_section batch $PY scripts/gpu/batch_decode.py --model "$CKPT" \
             --out "$OUT/batch_decode.json" ;;
    trees) run_section trees bash scripts/gpu/trees_check.sh ;;
    serve) checkpoint && run_section serve $PY -m evokernel bench serve --model "$CKPT" \
             --device cuda --out "$OUT/bench_serve.json" --serve-args "${SERVE_ARGS:-}" ;;
    persistent) checkpoint && run_section persistent $PY scripts/gpu/persistent_check.py \
                  --model "$CKPT" --out "$OUT/persistent.json" ;;
    rows) checkpoint && run_section rows bash scripts/gpu/rows_check.sh ;;
    *) echo "unknown section $s (env tests engine stages sync evaluator evolve bench throughput layer families batch trees serve persistent rows)"
       exit 2 ;;
  esac
done
$PY scripts/gpu/summary.py "$OUT"
