"""Batched decode on a CUDA machine: aggregate tok/s of the engine's own `generate` at batch
sizes 1..64 (CUDA graph, greedy, random prompts of one length), and how often each prompt's
greedy tokens at batch B equal the same prompt's alone with the same variant's kernels (the
Triton rows kernel sums in another order than the one-row kernels, so random-weight ties may
flip late tokens; the first mismatch position is reported).

    PYTHONPATH=src python3 scripts/gpu/batch_decode.py --model DIR [--out FILE.json]
        [--batches 1,2,4,8,16,32,64] [--prompt-len 32] [--new-tokens 128]
        [--variants default,one-row]

Variants are launch choices of the decode kernels (`DecodeTuning` fields): those of
`evokernel.bench.decode_stages` (`default`, `swap-pre-w2`, ...), `one-row` (the one-row
CUDA-core kernels up to 8 rows, the rows kernel beyond) and `rows-from2`. Prints one
line per variant and batch size and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from evokernel.bench.decode_stages import VARIANTS as STAGE_VARIANTS
from evokernel.engine import graph
from evokernel.engine.generate import GenerateOptions, generate
from evokernel.engine.loading import load_engine
from evokernel.ops.registry import OpSet
from evokernel.ops.tuning import DEFAULT, DecodeTuning

# decode_stages' launch variants (`DecodeTuning` overrides), and these
VARIANTS = {
    **{name: v for name, v in STAGE_VARIANTS.items() if set(v) <= set(DecodeTuning._fields)},
    "one-row": {"rows_min": 9},
    "rows-from2": {"rows_min": 2},
}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--out")
    p.add_argument("--batches", default="1,2,4,8,16,32,64")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--variants", default="default,one-row")
    args = p.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    model = load_engine(args.model, "cuda", torch.bfloat16, "triton")
    g = torch.Generator().manual_seed(0)
    vocab = model.cfg.vocab_size
    prompts = torch.randint(0, vocab, (max(batches), args.prompt_len), generator=g).tolist()
    opts = GenerateOptions(max_new_tokens=args.new_tokens, eos_token_ids=())
    rows = []
    for variant in args.variants.split(","):
        model.ops = OpSet.triton(tuning=DEFAULT._replace(**VARIANTS[variant]))
        graph._RUNNERS.clear()  # graphs captured with the previous variant's kernels
        # each prompt alone, with this variant's kernels
        alone = {i: generate(model, [prompts[i]], opts).tokens[0] for i in range(max(batches))}
        base = None
        for B in batches:
            res = generate(model, prompts[:B], opts)
            res = generate(model, prompts[:B], opts)  # the second: graphs and caches warm
            same = sum(res.tokens[i] == alone[i] for i in range(B))
            first = [
                next((t for t, (a, b) in enumerate(zip(res.tokens[i], alone[i])) if a != b), None)
                for i in range(B)
            ]
            step_ms = 1000 * B / res.decode_tok_s
            base = base or res.decode_tok_s
            row = {
                "variant": variant,
                "batch": B,
                "decode_tok_s": res.decode_tok_s,
                "step_ms": step_ms,
                "vs_batch1": res.decode_tok_s / base,
                "same_as_alone": same,
                "first_mismatch": [f for f in first if f is not None][:8],
            }
            rows.append(row)
            print(
                f"{variant:<8} B={B:<3} {res.decode_tok_s:9.0f} tok/s  step {step_ms:6.3f} ms  "
                f"{row['vs_batch1']:5.2f}x B=1  greedy equal to alone: {same}/{B}",
                flush=True,
            )
    summary = {
        "gpu": torch.cuda.get_device_name(),
        "model": str(Path(args.model)),
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "rows": rows,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
