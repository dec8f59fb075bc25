#!/usr/bin/env bash
# The search-drives-the-engine check on a CUDA machine, from the source tree (no install).
#
#   scripts/gpu/layer_check.sh [SECTION...]      default: eval search pack06 pack17
#
#   eval    the decode_layer seed evaluated at Qwen3-0.6B's shapes (graph-timed against the
#           engine's layer and the torch-ops layer), JSON in $OUT/layer_seed.json
#   search  offline search vs the exhaustive sweep of the seed's declared (structural) knob
#           space: evolve_bench --tasks decode_layer, $OUT/evolve_bench.json
#   pack06  random Qwen3-0.6B checkpoint: `tune` for $TUNE_MINUTES (default 4), `verify
#           --kernels`, then `bench decode --kernels` (our engine with and without the pack
#           in one run) into $OUT/bench_pack06.json
#   pack17  the same for the qwen3-1.7b preset (random weights): a second Qwen3 shape
#
# OUT (default ./out), PYTHON (python3), TUNE_MINUTES, TUNE_ITERATIONS, BENCH_POSITIONS,
# SEARCH_MINUTES override. Exit status:
# the number of failed sections.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
TUNE_MINUTES=${TUNE_MINUTES:-4}
TUNE_ITERATIONS=${TUNE_ITERATIONS:-16}
POSITIONS=${BENCH_POSITIONS:-1,512,2048,4096,8192,16384,32000}
sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(eval search pack06 pack17)
failed=0

section() {
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name ==="
  "$@" 2>&1 | tee "$OUT/layer_$name.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -ne 0 ] && failed=$((failed + 1))
  echo "=== $name: rc=$rc in $((SECONDS - t0)) s ==="
}

# shellcheck disable=SC2329  # called through section
pack() {  # preset tag
  local preset=$1 tag=$2 ckpt=/tmp/evokernel-$1
  [ -f "$ckpt/config.json" ] || $PY -m evokernel model random "$ckpt" --preset "$preset" --seed 0 \
    || return 1
  $PY -m evokernel tune --model "$ckpt" --out "$OUT/pack$tag" --budget-minutes "$TUNE_MINUTES" \
    --iterations "$TUNE_ITERATIONS" --device cuda || return 1
  $PY -m evokernel verify --model "$ckpt" --kernels "$OUT/pack$tag" --device cuda || return 1
  $PY -m evokernel bench decode --model "$ckpt" --kernels "$OUT/pack$tag" --device cuda \
    --baselines evokernel --positions "$POSITIONS" --out "$OUT/bench_pack$tag.json"
}

for s in "${sections[@]}"; do
  case $s in
    eval) section eval "$PY" -m evokernel eval decode_layer src/evokernel/tasks/decode_layer/seed.py \
            --device cuda --json ;;
    search) section search "$PY" -m evokernel.bench.evolve_bench --tasks decode_layer --out "$OUT" \
              --max-minutes "${SEARCH_MINUTES:-8}" ;;
    pack06) section pack06 pack qwen3-0.6b 06 ;;
    pack17) section pack17 pack qwen3-1.7b 17 ;;
    *) echo "unknown section $s (eval search pack06 pack17)"; exit 2 ;;
  esac
done
exit "$failed"
