#!/usr/bin/env bash
# This tree's engine against another tree's on the same GPU, in one call: `bench decode` of
# each (our engine only) on one checkpoint, alternately, then `bench decode --compare`.
#
#   OLD=.old/src scripts/gpu/trees_check.sh        OLD: the other tree's src/ (e.g. from
#                                                  `git archive <commit> src | tar -x -C .old`)
# MODEL (default /tmp/evokernel-qwen3-0.6b, written if missing), SUITE (full), ROUNDS (1: each
# tree benched this many times, alternating), then this tree once more: the spread.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
SUITE=${SUITE:-full}
MODEL=${MODEL:-/tmp/evokernel-qwen3-0.6b}
OLD=${OLD:?set OLD to the src directory of the other tree}
NEW=$PWD/src
[ -f "$MODEL/config.json" ] || PYTHONPATH=$NEW "$PY" -m evokernel model random "$MODEL" --preset qwen3-0.6b --seed 0 || exit 1
# old, new, then new again: the second new run against the first is the run-to-run spread
order=()
for round in $(seq 1 "${ROUNDS:-1}"); do order+=("old $round" "new $round"); done
order+=("new spread")
for item in "${order[@]}"; do
  read -r tree round <<< "$item"
  {
    src=$OLD; [ "$tree" = new ] && src=$NEW
    echo "--- $tree tree ($round)"
    PYTHONPATH=$src "$PY" -m evokernel bench decode --model "$MODEL" --suite "$SUITE" \
      --device cuda --baselines evokernel --out "$OUT/tree_${tree}_$round.json" \
      --max-minutes "${MAX_MINUTES:-3}" 2>&1 | tail -n 14
  }
done
for round in $(seq 1 "${ROUNDS:-1}"); do
  PYTHONPATH=$NEW "$PY" -m evokernel bench decode --compare "$OUT/tree_old_$round.json" "$OUT/tree_new_$round.json"
done
PYTHONPATH=$NEW "$PY" -m evokernel bench decode --compare "$OUT/tree_new_1.json" "$OUT/tree_new_spread.json"
exit 0
