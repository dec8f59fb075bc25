"""`evokernel verify`: compare the engine with transformers, step by step (engine/verify.py).

    evokernel verify --model DIR [--steps N] [--device cuda|cpu] [--dtype D]
        [--ops torch|triton] [--no-pdl] [--kernels PACK_DIR] [--prompt-ids 1,2,3] [--threshold X]
        [--fp32-ref | --no-fp32-ref] [--reference DIR] [--json]

Exit 0 when verification passes (engine/verify.py: the KL mean below the threshold, or in
bf16/fp16 as close to the float32 model as transformers itself); 1 with a one-line reason
otherwise, a --kernels program that disagrees with the reference in the pack's self-check
included (verify's self-check is always strict). A quantized checkpoint is compared with
transformers running the same weights, dequantized independently (engine/quant_verify.py);
`--reference DIR` (the dense model it was quantized from) adds the quantization's own KL and
argmax agreement, for information.
"""

from __future__ import annotations

import argparse
import json
import sys

from evokernel.cli import args as checked
from evokernel.cli.generate import (
    add_engine_args,
    kernels_dir,
    open_kernels,
    parse_ids,
    resolve_ops,
)

ORDER = 30


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="check the engine against HF transformers (KL, argmax)",
        description=(
            "Greedy-decode with transformers, teacher-force the engine on the same tokens and "
            "compare logits per step: KL(ref || ours) mean and max, argmax agreement."
        ),
    )
    p.add_argument("--model", required=True, metavar="DIR", help="checkpoint directory")
    p.add_argument(
        "--steps",
        default=32,
        metavar="N",
        help="decode steps compared, at least 1; prompt + N must fit the model's positions "
        "(default 32)",
    )
    add_engine_args(p)
    p.add_argument("--prompt-ids", metavar="IDS", help="comma-separated token ids (default: fixed)")
    p.add_argument(
        "--threshold",
        default=None,
        metavar="X",
        help="KL mean limit, finite and >= 0 (default 1e-5 fp32, 1e-3 bf16)",
    )
    p.add_argument(
        "--fp32-ref",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also compare with transformers in float32 (default: when the dtype is not float32)",
    )
    p.add_argument(
        "--reference",
        metavar="DIR",
        help="a quantized checkpoint's dense original: also report KL(original || ours) and "
        "argmax agreement (the quantization's own error; informational, never fails)",
    )
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evokernel.engine.packs.selfcheck import SelfCheckFailed
    from evokernel.engine.verify import PRECISION_FACTOR, default_prompt, verify
    from evokernel.model.config import ModelConfig

    model_dir = checked.existing_dir(args.model, "--model")
    steps = checked.integer(args.steps, "--steps", lo=1)
    threshold = None if args.threshold is None else checked.real(args.threshold, "--threshold", 0.0)
    prompt = parse_ids(args.prompt_ids) if args.prompt_ids is not None else None
    kernels = kernels_dir(args)
    original = (
        None if args.reference is None else checked.existing_dir(args.reference, "--reference")
    )
    if kernels is not None:
        cfg = ModelConfig.from_dir(model_dir)
        ids = prompt if prompt is not None else default_prompt(cfg.vocab_size)
        cfg.check_tokens(ids, steps, "--steps")  # as verify() does, before the pack's check
        try:  # the pack's programs against the reference first: a wrong one fails verify
            open_kernels(args, model_dir, len(ids) + steps, strict=True)
        except SelfCheckFailed as err:
            print(f"FAIL: {err}")
            print(f"verify failed: {err}", file=sys.stderr)
            return 1
    result = verify(
        model_dir,
        device=args.device,
        dtype=args.dtype,
        ops=resolve_ops(args),
        steps=steps,
        prompt=prompt,
        threshold=threshold,
        fp32_reference=args.fp32_ref,
        pdl=False if args.no_pdl else None,
        kernels=kernels,
        reference=original,
    )
    print(
        f"{result.steps} steps after a {result.prompt_len}-token prompt, {result.device} "
        f"{result.dtype}, ops {args.ops}"
        f"{f', kernels {kernels}' if kernels is not None else ''}, "
        f"cuda graph {'on' if result.cuda_graph else 'off'}"
    )
    print(
        f"KL(ref || ours): mean {result.kl_mean:.3e}, max {result.kl_max:.3e} "
        f"(threshold {result.threshold:g}); argmax agreement {result.argmax_agreement:.3f}"
    )
    if result.fp32_kl_mean is not None:
        print(
            f"vs transformers float32: ours {result.fp32_kl_mean:.3e}, "
            f"transformers {result.dtype} {result.fp32_kl_mean_ref:.3e}"
        )
    if result.quantization is not None:
        line = f"quantized: {result.quantization}"
        if result.original_kl_mean is not None:
            line += (
                f"; vs the original {args.reference}: KL mean {result.original_kl_mean:.3e}, "
                f"argmax agreement {result.original_argmax_agreement:.3f} (informational)"
            )
        print(line)
    if result.criterion == "fp32_precision":
        # The KL line above reads like a failure: say which rule passed, and why.
        print(
            f"PASS (fp32_precision): the KL mean is above the {result.threshold:g} threshold, "
            f"but ours is as close to float32 as transformers' own {result.dtype} "
            f"(within {PRECISION_FACTOR:g}x)"
        )
    else:
        print(f"PASS ({result.criterion})" if result.passed else f"FAIL: {result.reason}")
    if args.json:
        record = result.to_dict()
        record["ops_kind"] = args.ops
        record["model"] = str(args.model)
        record["kernels"] = str(kernels) if kernels is not None else None
        print(json.dumps(record))
    if not result.passed:
        print(f"verify failed: {result.reason}", file=sys.stderr)
        return 1
    return 0
