#!/usr/bin/env bash
# The main job on built-in defaults: set up (idempotent), then
#   1. write a random-weight Qwen3-0.6B-shaped checkpoint (unless MODEL=DIR is given),
#   2. verify the engine against HF transformers (KL, argmax agreement),
#   3. generate from a prompt,
#   4. run a short evolutionary search on gqa_decode_attention with the offline mutator
#      (no LLM needed), ending with its summary table.
# Runs on a CUDA GPU when one is present, else on the CPU (fp32, torch ops for the model;
# the search runs its Triton candidates under the interpreter: correctness only, no speed).
#
# Environment: MODEL=DIR (an existing checkpoint), RUN_DIR=DIR (the search's run directory,
# default runs/main; an existing one is resumed), ITERATIONS=N (search iterations, default 8).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh ref
# shellcheck disable=SC1091
. .venv/bin/activate
# setup.sh leaves an `evokernel` command in .venv/bin (console script, or a wrapper when it ran
# src/ in place); should a hand-made venv lack one, the module form does the same.
[ -x .venv/bin/evokernel ] || evokernel() { python -m evokernel "$@"; }

if python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  device=cuda ops=triton steps=64
else
  device=cpu ops=torch steps=8
fi
echo "== evokernel main job on $device"

model=${MODEL:-checkpoints/random-qwen3-0.6b}
if [ -z "${MODEL:-}" ] && [ ! -f "$model/config.json" ]; then
  evokernel model random "$model" --preset qwen3-0.6b --seed 0
fi

echo "== verify: our engine vs HF transformers ($steps teacher-forced steps)"
evokernel verify --model "$model" --device "$device" --ops "$ops" --steps "$steps"

echo "== generate"
evokernel generate --model "$model" --device "$device" --ops "$ops" \
  --prompt "The fastest way to decode a small language model is" --max-new-tokens 32

run_dir=${RUN_DIR:-runs/main}
echo "== evolve gqa_decode_attention with the offline mutator into $run_dir"
if [ -f "$run_dir/programs.sqlite" ]; then
  evokernel evolve --task gqa_decode_attention --device "$device" --out "$run_dir" --resume
else
  evokernel evolve --task gqa_decode_attention --device "$device" --out "$run_dir" \
    --iterations "${ITERATIONS:-8}"
fi
evokernel status "$run_dir"
