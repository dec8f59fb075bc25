#!/usr/bin/env bash
# The main job on built-in defaults: set up (idempotent), then
#   1. write a random-weight Qwen3-0.6B-shaped checkpoint (unless MODEL=DIR is given),
#   2. verify the engine against HF transformers (KL, argmax agreement),
#   3. generate from a prompt,
#   4. tune: a short evolutionary search (offline mutator, no LLM needed) of the whole decode
#      layer (`decode_layer`) at the checkpoint's shapes, written as a kernel pack,
#   5. generate again with the pack (`--kernels`).
# Runs on a CUDA GPU when one is present, else on the CPU (fp32, torch ops for the model; the
# search runs its Triton candidates under the interpreter: a correctness demonstration, nothing
# is timed, so every context bucket of the pack keeps the engine's own layer).
#
# Environment: MODEL=DIR (an existing checkpoint), PACK=DIR (the kernel pack, default
# runs/pack; its search runs live in PACK/runs/ and an existing one is resumed), ITERATIONS=N
# (search iterations in all, default 8 on a GPU, 4 on the CPU), MINUTES=M (the tune's time
# budget per invocation, default 4).
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

pack=${PACK:-runs/pack}
if [ "$device" = cuda ]; then iterations=${ITERATIONS:-8}; else iterations=${ITERATIONS:-4}; fi
echo "== tune: the decode layer at this checkpoint's shapes, offline mutator, into $pack"
[ "$device" = cpu ] && echo "   (CPU: a correctness demonstration under Triton's interpreter, no timings)"
evokernel tune --model "$model" --device "$device" --out "$pack" --iterations "$iterations" \
  --budget-minutes "${MINUTES:-4}"

echo "== generate with the kernel pack"
evokernel generate --model "$model" --device "$device" --ops "$ops" --kernels "$pack" \
  --prompt "The fastest way to decode a small language model is" --max-new-tokens 32
