#!/usr/bin/env bash
# The main job on built-in defaults: set up (idempotent), then
#   1. write a random-weight Qwen3-0.6B-shaped checkpoint (unless MODEL=DIR is given),
#   2. verify the engine against HF transformers (KL, argmax agreement),
#   3. generate from a prompt,
#   4. tune: a short evolutionary search (offline mutator, no LLM needed) of the whole decode
#      layer (`decode_layer`) at the checkpoint's shapes, written as a kernel pack,
#   5. generate again with the pack (`--kernels`),
#   6. write the search's report page (`evokernel report`), and list what was written.
# Runs on a CUDA GPU when one is present, else on the CPU (fp32, torch ops for the model; the
# search runs its Triton candidates under the interpreter, on a stand-in layer smaller than the
# checkpoint's: a correctness demonstration, nothing is timed, so every context bucket of the
# pack keeps the engine's own layer). On the CPU the whole job takes about 6 minutes; a step
# that works quietly prints a line every 20 s (EVOKERNEL_TICK_S) saying it still runs.
#
# Environment: MODEL=DIR (an existing checkpoint), PACK=DIR (the kernel pack, default
# runs/pack; its search runs live in PACK/runs/ and an existing one is resumed), ITERATIONS=N
# (search iterations in all, default 8 on a GPU, 4 on the CPU), MINUTES=M (the tune's time
# budget per invocation, default 4).
set -euo pipefail
cd "$(dirname "$0")"
echo "== setup: the venv in .venv (the first run installs packages: minutes)"
scripts/setup.sh ref
# shellcheck disable=SC1091
. .venv/bin/activate
# setup.sh leaves an `evokernel` command in .venv/bin (console script, or a wrapper when it ran
# src/ in place); should a hand-made venv lack one, the module form does the same.
[ -x .venv/bin/evokernel ] || evokernel() { python -m evokernel "$@"; }

# ticking LABEL CMD...: run CMD in the foreground (Ctrl-C reaches it) with a line every
# ${EVOKERNEL_TICK_S:-20} s saying LABEL and the time spent; returns CMD's status.
# (scripts/setup.sh has the same helper.)
ticker=
stop_ticker() {
  if [ -n "$ticker" ]; then
    kill "$ticker" 2>/dev/null || true
    wait "$ticker" 2>/dev/null || true
    ticker=
  fi
}
ticking() {
  local label=$1 start rc=0
  shift
  start=$(date +%s)
  (
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM # its sleep goes with it
    while :; do
      sleep "${EVOKERNEL_TICK_S:-20}" &
      nap=$!
      wait "$nap"
      echo "   ... $label ($(($(date +%s) - start)) s)"
    done
  ) &
  ticker=$!
  trap stop_ticker EXIT
  "$@" || rc=$?
  stop_ticker
  return "$rc"
}

if python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  device=cuda ops=triton steps=64
else
  device=cpu ops=torch steps=8
fi
echo "== evokernel main job on $device"

model=${MODEL:-checkpoints/random-qwen3-0.6b}
if [ -z "${MODEL:-}" ] && [ ! -f "$model/config.json" ]; then
  echo "== model: a random-weight Qwen3-0.6B-shaped checkpoint (1.2 GB) into $model"
  ticking "still writing the checkpoint" \
    evokernel model random "$model" --preset qwen3-0.6b --seed 0
fi

echo "== verify: our engine vs HF transformers ($steps teacher-forced steps)"
[ "$device" = cpu ] && echo "   (CPU: loads both models in float32 and decodes with each: about a minute or two)"
ticking "verify still running" \
  evokernel verify --model "$model" --device "$device" --ops "$ops" --steps "$steps"

prompt="The fastest way to decode a small language model is"
echo "== generate"
ticking "generate still running" \
  evokernel generate --model "$model" --device "$device" --ops "$ops" --prompt "$prompt" \
  --max-new-tokens 32

pack=${PACK:-runs/pack}
if [ "$device" = cuda ]; then iterations=${ITERATIONS:-8}; else iterations=${ITERATIONS:-4}; fi
echo "== tune: the decode layer at this checkpoint's shapes, offline mutator, into $pack"
[ "$device" = cpu ] && echo "   (CPU: a correctness demonstration under Triton's interpreter, no timings)"
ticking "tune still running" \
  evokernel tune --model "$model" --device "$device" --out "$pack" --iterations "$iterations" \
  --budget-minutes "${MINUTES:-4}"

echo "== generate with the kernel pack"
ticking "generate still running" \
  evokernel generate --model "$model" --device "$device" --ops "$ops" --kernels "$pack" \
  --prompt "$prompt" --max-new-tokens 32

echo "== report: the search as one HTML page"
reports=()
for run in "$pack"/runs/*/; do
  run=${run%/}
  if evokernel report "$run"; then reports+=("$run/report.html"); fi
done

echo "== done. Written:"
[ -z "${MODEL:-}" ] && echo "   $model/                  the random-weight checkpoint"
echo "   $pack/pack.json, $pack/programs/   the kernel pack (use it: --kernels $pack)"
for run in "$pack"/runs/*/; do
  echo "   ${run%/}/   its search (programs.sqlite, summary.json, dispatch.json)"
done
for page in "${reports[@]}"; do
  echo "   $page   open it in a browser"
done
echo "   Write a run's page again (or any evolve run's): evokernel report RUN_DIR"
