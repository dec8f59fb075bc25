#!/usr/bin/env bash
# Every model family on a CUDA machine, from the source tree: for each preset (random weights,
# the published shapes), `verify` against transformers in bf16 (fast path, 32 steps), then
# `bench decode` with our engine and the gpt-fast-style baseline at the suite's positions.
#
#   scripts/gpu/families_check.sh                       verify + quick bench, three presets
#   PRESETS=llama-3.2-1b SUITE=full scripts/gpu/families_check.sh
#
# PRESETS (default qwen3-0.6b,llama-3.2-1b,qwen2.5-0.5b), SUITE (quick), BENCH (1: run the
# bench; 0: verify only), VERIFY (1; 0: bench only), BASELINES (evokernel,gptfast). Checkpoints go to /tmp/evokernel-<preset>
# (kept for later sections). JSON: $OUT/verify_<preset>.json, $OUT/bench_<preset>_<suite>.json.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
SUITE=${SUITE:-quick}
rc=0
IFS=, read -r -a presets <<< "${PRESETS:-qwen3-0.6b,llama-3.2-1b,qwen2.5-0.5b}"
for preset in "${presets[@]}"; do
  ckpt=/tmp/evokernel-$preset
  [ -f "$ckpt/config.json" ] || "$PY" -m evokernel model random "$ckpt" --preset "$preset" --seed 0 || { rc=1; continue; }
  if [ "${VERIFY:-1}" = 1 ]; then
    echo "--- verify $preset"
    "$PY" -m evokernel verify --model "$ckpt" --device cuda --steps 32 --json | tee "$OUT/verify_$preset.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    tail -n 1 "$OUT/verify_$preset.log" > "$OUT/verify_$preset.json"
  fi
  if [ "${BENCH:-1}" = 1 ]; then
    echo "--- bench decode $preset ($SUITE)"
    "$PY" -m evokernel bench decode --model "$ckpt" --suite "$SUITE" --device cuda \
      --baselines "${BASELINES:-evokernel,gptfast}" --out "$OUT/bench_${preset}_$SUITE.json" \
      --max-minutes "${MAX_MINUTES:-4}" 2>&1 | tail -n 25
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  fi
done
exit $rc
