#!/usr/bin/env bash
# Engine check on a CUDA machine, from the source tree (PYTHONPATH=src python3 -m evokernel):
# uses the random Qwen3-0.6B checkpoint at $CKPT (written there first if missing; default: a
# temp dir removed afterwards), then
#   verify    vs transformers, 64 steps, Triton ops (and again with torch ops)
#   generate  22-token prompt, 200 new tokens, batch 1: Triton ops + CUDA graph (the engine),
#             the same without programmatic dependent launch (what PDL buys), Triton ops eager
#             (what the graph buys), torch ops + CUDA graph
# Each run's JSON line goes to ${OUT:-out}/engine_<run>.json; a table is printed last.
# Exit 1 if any run fails (verify out of tolerance included).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=${CKPT:-$tmp/qwen3-0.6b}
# 22 ids: a short chat turn in Qwen3's vocabulary.
prompt=151644,8948,198,2610,525,264,10950,17847,13,151645,198,151644,872,198,9707,11,1246,525,498,30,151645,198

rc=0
run() {
  local name=$1
  shift
  echo "--- $name: evokernel $*"
  "$PY" -m evokernel "$@" | tee "$tmp/$name.log"
  local code=${PIPESTATUS[0]}
  if tail -n 1 "$tmp/$name.log" | "$PY" -c 'import json, sys; json.loads(sys.stdin.read())' 2>/dev/null; then
    tail -n 1 "$tmp/$name.log" > "$OUT/engine_$name.json"
  else
    echo "$name: no JSON line" >&2
  fi
  [ "$code" -eq 0 ] || { echo "$name: exit $code" >&2; rc=1; }
}

[ -f "$model/config.json" ] || "$PY" -m evokernel model random "$model" --preset qwen3-0.6b --seed 0 || exit 1
run verify verify --model "$model" --device cuda --steps 64 --ops triton --json
run verify_torch verify --model "$model" --device cuda --steps 64 --ops torch --json
gen=(generate --model "$model" --prompt-ids "$prompt" --max-new-tokens 200 --device cuda --ignore-eos --json)
run generate "${gen[@]}" --ops triton
run generate_no_pdl "${gen[@]}" --ops triton --no-pdl
run generate_eager "${gen[@]}" --ops triton --no-graph
run generate_torch "${gen[@]}" --ops torch

"$PY" - "$OUT" <<'PYEOF'
import json, pathlib, sys

out = pathlib.Path(sys.argv[1])
print("engine check (Qwen3-0.6B shapes, random bf16 weights, batch 1)")
for name in ("verify", "verify_torch"):
    p = out / f"engine_{name}.json"
    if p.is_file():
        r = json.loads(p.read_text())
        fp32 = r.get("fp32_kl_mean")
        extra = f", fp32 ours {fp32:.2e} / hf {r['fp32_kl_mean_ref']:.2e}" if fp32 is not None else ""
        print(f"{name:<16} KL mean {r['kl_mean']:.2e} max {r['kl_max']:.2e} argmax "
              f"{r['argmax_agreement']:.3f} {'PASS ' + r['criterion'] if r['passed'] else 'FAIL'}{extra}")
for name in ("generate", "generate_no_pdl", "generate_eager", "generate_torch"):
    p = out / f"engine_{name}.json"
    if p.is_file():
        r = json.loads(p.read_text())
        print(f"{name:<16} {r['decode_tok_s']:8.1f} tok/s decode, prefill {r['prefill_ms']:.2f} ms, "
              f"{len(r['tokens'])} tokens, graph {r['cuda_graph']}, warm-up {r['warmup_ms']:.0f} ms")
PYEOF
exit $rc
