"""`evokernel generate`: generate tokens with the engine; `--json` ends stdout with one line.

evokernel generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) --max-new-tokens N
    [--temperature T] [--top-p P] [--top-k K] [--seed S] [--device cuda|cpu]
    [--dtype D] [--ops torch|triton] [--no-pdl] [--no-graph] [--json]
"""

from __future__ import annotations

import argparse
import json

from evokernel.errors import EvokernelError

ORDER = 20


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate",
        help="generate tokens with the engine",
        description="Prefill a prompt and decode up to --max-new-tokens tokens (stops at EOS).",
    )
    p.add_argument("--model", required=True, metavar="DIR", help="checkpoint directory")
    prompt = p.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", metavar="TEXT", help="text (needs tokenizer.json in DIR)")
    prompt.add_argument("--prompt-ids", metavar="IDS", help="comma-separated token ids")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N")
    add_engine_args(p)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0 = off")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--ignore-eos", action="store_true", help="always decode --max-new-tokens")
    p.add_argument("--no-graph", action="store_true", help="decode eagerly on CUDA")
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line")
    p.set_defaults(func=run)


def add_engine_args(p: argparse.ArgumentParser) -> None:
    """--device, --dtype, --ops, --no-pdl: shared by generate and verify."""
    p.add_argument(
        "--device", choices=("cuda", "cpu"), default=None, help="default: cuda if present"
    )
    p.add_argument(
        "--dtype",
        choices=("bfloat16", "float16", "float32"),
        default=None,
        help="default: bfloat16 on CUDA, float32 on CPU",
    )
    p.add_argument(
        "--ops",
        choices=("torch", "triton"),
        default=None,
        help="op implementations: our Triton kernels and task seeds, or torch (default: triton "
        "on CUDA; torch on the CPU, where Triton runs only under its slow interpreter)",
    )
    p.add_argument(
        "--no-pdl",
        action="store_true",
        help="launch the Triton decode kernels without programmatic dependent launch (on by "
        "default on sm_90+ GPUs; this measures what it buys)",
    )


def resolve_ops(args: argparse.Namespace) -> str:
    """The --ops value, with the device's default filled in (and stored back in args)."""
    if args.ops is None:
        from evokernel import device as devices

        args.ops = "triton" if devices.resolve(args.device) == "cuda" else "torch"
    return str(args.ops)


def parse_ids(text: str, flag: str = "--prompt-ids") -> list[int]:
    try:
        ids = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise EvokernelError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not ids:
        raise EvokernelError(f"{flag}: no token ids given")
    return ids


def run(args: argparse.Namespace) -> int:
    from evokernel.engine.generate import GenerateOptions, generate
    from evokernel.engine.loading import encode_prompt, load_engine, load_tokenizer
    from evokernel.ops.sampling import SamplingParams

    sampling = SamplingParams(args.temperature, args.top_k, args.top_p)
    prompt = (
        parse_ids(args.prompt_ids) if args.prompt_ids else encode_prompt(args.model, args.prompt)
    )
    model = load_engine(
        args.model, args.device, args.dtype, resolve_ops(args), pdl=False if args.no_pdl else None
    )
    options = GenerateOptions(
        max_new_tokens=args.max_new_tokens,
        sampling=sampling,
        seed=args.seed,
        eos_token_ids=() if args.ignore_eos else model.cfg.eos_token_ids,
        use_graph=False if args.no_graph else None,
    )
    result = generate(model, [prompt], options, load_tokenizer(args.model))
    tokens = result.tokens[0]
    text = result.text[0] if result.text is not None else None

    print(text if text is not None else " ".join(map(str, tokens)))
    label = "" if result.device == "cuda" else " (CPU: a correctness run, not a speed figure)"
    print(
        f"{len(prompt)} prompt + {len(tokens)} new tokens ({result.stop_reasons[0]}); "
        f"prefill {result.prefill_ms:.2f} ms; decode {result.decode_tok_s:.1f} tok/s over "
        f"{result.decode_steps} steps; warm-up {result.warmup_ms:.0f} ms; "
        f"{result.device} {result.dtype}, ops {args.ops}, "
        f"cuda graph {'on' if result.cuda_graph else 'off'}{label}"
    )
    if args.json:
        record = {
            "tokens": tokens,
            "text": text,
            "prompt_len": len(prompt),
            "stop_reason": result.stop_reasons[0],
            "prefill_ms": result.prefill_ms,
            "decode_ms": result.decode_ms,
            "decode_wall_ms": result.decode_wall_ms,
            "decode_steps": result.decode_steps,
            "decode_tok_s": result.decode_tok_s,
            "warmup_ms": result.warmup_ms,
            "device": result.device,
            "dtype": result.dtype,
            "ops": args.ops,
            "op_origin": result.ops,
            "cuda_graph": result.cuda_graph,
            "model": str(args.model),
        }
        print(json.dumps(record))
    return 0
