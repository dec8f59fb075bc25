"""`evokernel generate`: generate tokens with the engine; `--json` ends stdout with one line.

evokernel generate --model DIR (--prompt TEXT [--chat [--chat-template F]] | --prompt-ids 1,2,3)
    --max-new-tokens N
    [--temperature T] [--top-p P] [--top-k K] [--seed S] [--device cuda|cpu]
    [--dtype D] [--ops torch|triton] [--no-pdl] [--kernels PACK_DIR] [--no-graph] [--json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from evokernel.cli import args as checked
from evokernel.errors import ConfigError

if TYPE_CHECKING:
    from evokernel.engine.packs.format import Pack

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
    p.add_argument(
        "--chat",
        action="store_true",
        help="send --prompt as one user message through the checkpoint's chat template "
        "(needs jinja2: pip install 'evokernel[serve]')",
    )
    p.add_argument(
        "--chat-template",
        metavar="FILE",
        help="with --chat: this Jinja template (or chatml, the built-in one) instead of the "
        "checkpoint's",
    )
    p.add_argument(
        "--max-new-tokens",
        default=128,
        metavar="N",
        help="at least 1; prompt + N must fit the model's positions (default 128)",
    )
    add_engine_args(p)
    p.add_argument(
        "--temperature",
        default=0.0,
        metavar="T",
        help="0 = greedy (default); sampling takes a finite value >= 1e-05",
    )
    p.add_argument("--top-p", default=1.0, metavar="P", help="nucleus mass in (0, 1] (default 1)")
    p.add_argument(
        "--top-k", default=0, metavar="K", help="0 = off (default), at most the vocabulary size"
    )
    p.add_argument("--seed", default=0, metavar="S", help="sampling seed in [0, 2**63) (default 0)")
    p.add_argument("--ignore-eos", action="store_true", help="always decode --max-new-tokens")
    p.add_argument("--no-graph", action="store_true", help="decode eagerly on CUDA")
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line")
    p.set_defaults(func=run)


def add_engine_args(p: argparse.ArgumentParser) -> None:
    """--device, --dtype, --ops, --no-pdl, --kernels: shared by generate, verify and bench
    decode (where they set up our engine)."""
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
    p.add_argument(
        "--kernels",
        metavar="PACK_DIR",
        help="run the engine's decode layer with a kernel pack's programs (evokernel tune), "
        "per context bucket; a pack from another GPU model, model shape or dtype is refused, "
        "and so is one this user's tune did not sign (see --trust-kernels). Each program is "
        "first run once beside the engine's layer (the self-check); a bucket whose program "
        "disagrees falls back to the engine's layer with a warning",
    )
    p.add_argument(
        "--trust-kernels",
        action="store_true",
        help="run the --kernels pack's programs although this user's tune did not sign it: "
        "they are Python code that runs in this process with your permissions (read them "
        "first); their content hashes and the static check still apply (docs/packs.md)",
    )
    p.add_argument(
        "--strict-kernels",
        action="store_true",
        help="stop (exit 2) when a --kernels program disagrees with the engine's layer in the "
        "self-check, instead of falling back to the engine's layer for its bucket",
    )


def kernels_dir(args: argparse.Namespace) -> Path | None:
    """The --kernels directory, checked to exist (its contents are checked as it loads)."""
    if args.kernels is None:
        return None
    return checked.existing_dir(args.kernels, "--kernels")


def open_kernels(
    args: argparse.Namespace, model_dir: Path, max_len: int | None, strict: bool = False
) -> Pack | None:
    """The --kernels pack admitted for this command's engine (packs.use.open_pack: fit,
    trust, static check, import, self-check), before any weight loads; None without
    --kernels. `strict` makes the self-check strict whatever --strict-kernels says."""
    from evokernel import device as devices
    from evokernel.engine.packs.use import PackPolicy, open_pack
    from evokernel.model.config import ModelConfig
    from evokernel.model.loader import resolve_dtype
    from evokernel.ops.registry import OpSet

    path = kernels_dir(args)
    if path is None:
        return None
    device = devices.resolve(args.device)
    devices.prepare(device)
    dtype = devices.default_dtype(device) if args.dtype is None else resolve_dtype(args.dtype)
    layer = OpSet.named(resolve_ops(args), False if args.no_pdl else None).decode_layer
    policy = PackPolicy(args.trust_kernels, strict or args.strict_kernels)
    cfg = ModelConfig.from_dir(model_dir)
    return open_pack(path, cfg, device, dtype, layer, max_len=max_len, policy=policy)


def resolve_ops(args: argparse.Namespace) -> str:
    """The --ops value, with the device's default filled in (and stored back in args).

    Triton ops on the CPU run under Triton's interpreter: its environment is checked here, so
    an incompatible one is a one-line error before anything is loaded."""
    from evokernel import device as devices

    device = devices.resolve(args.device)
    if args.ops is None:
        args.ops = "triton" if device == "cuda" else "torch"
    if args.ops == "triton" and device == "cpu":
        devices.check_interpreter(", or use --ops torch")
    return str(args.ops)


def chat_prompt(model_dir: Path, text: str, template: str | None) -> str:
    """`text` as one user message, rendered with the checkpoint's chat template (or
    `template`: a file, or `chatml`), a generation prompt appended."""
    try:
        from evokernel.serve.chat_template import TemplateFailure, load_chat_template
    except ImportError:
        raise ConfigError("--chat needs jinja2 (pip install 'evokernel[serve]')") from None
    chat = load_chat_template(model_dir, Path(template) if template is not None else None)
    if chat is None:
        raise ConfigError(
            f"{model_dir} has no chat template (tokenizer_config.json chat_template or "
            "chat_template.jinja); pass --chat-template FILE or chatml"
        )
    try:
        return chat.render([{"role": "user", "content": text}], {})
    except TemplateFailure as err:
        raise ConfigError(f"the chat template cannot render the prompt: {err}") from None


def parse_ids(text: str, flag: str = "--prompt-ids") -> list[int]:
    """Comma-separated token ids (see `evokernel.cli.args.int_list`)."""
    return checked.int_list(text, flag)


def shown_text(text: str | None, tokens: list[int]) -> str:
    """What generate prints for the new tokens: their text, with control characters shown as
    escapes (a random checkpoint's bytes would otherwise reach the terminal raw); the token
    ids when there is no tokenizer, and beside a note when the text has nothing printable
    (random weights pick arbitrary byte tokens: the line would look empty)."""
    ids = " ".join(map(str, tokens))
    if text is None:
        return ids
    shown = "".join(c if c.isprintable() or c in "\n\t" else _escape(c) for c in text)
    if any(c.isprintable() and not c.isspace() for c in text):
        return shown
    if not tokens:
        return "(no new tokens)"
    what = f'"{shown}" ' if shown else ""
    return (
        f"{what}(note: the {len(tokens)} new tokens decode to no printable text, as a "
        f"random-weight checkpoint's usually do; token ids: {ids})"
    )


def _escape(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def run(args: argparse.Namespace) -> int:
    from evokernel.engine.generate import GenerateOptions, generate
    from evokernel.engine.loading import encode_prompt, load_engine, load_tokenizer
    from evokernel.model.config import ModelConfig, is_regular_file
    from evokernel.model.tokenizer import TOKENIZER_FILE
    from evokernel.ops.sampling import SamplingParams

    model_dir = checked.existing_dir(args.model, "--model")
    max_new = checked.integer(args.max_new_tokens, "--max-new-tokens", lo=1)
    top_k = checked.integer(args.top_k, "--top-k", lo=0)
    sampling = SamplingParams(
        checked.real(args.temperature, "--temperature", lo=0.0),
        top_k,
        checked.real(args.top_p, "--top-p", lo=0.0, hi=1.0, lo_open=True),
    )
    seed = checked.seed(args.seed)
    kernels = kernels_dir(args)
    ops = resolve_ops(args)
    # The config alone bounds the prompt, the new tokens and top-k: checked before loading.
    cfg = ModelConfig.from_dir(model_dir)
    is_regular_file(model_dir / TOKENIZER_FILE)  # a FIFO or directory there is an error
    if top_k > cfg.vocab_size:
        raise ConfigError(f"--top-k must be <= the vocabulary size {cfg.vocab_size}, got {top_k}")
    if args.chat_template is not None and not args.chat:
        raise ConfigError("--chat-template goes with --chat")
    if args.prompt_ids is not None:
        if args.chat:
            raise ConfigError("--chat renders --prompt text; it does not take --prompt-ids")
        prompt = parse_ids(args.prompt_ids)
    else:
        text = chat_prompt(model_dir, args.prompt, args.chat_template) if args.chat else args.prompt
        prompt = encode_prompt(model_dir, text)
    cfg.check_tokens(prompt, max_new, "--max-new-tokens")
    pack = open_kernels(args, model_dir, len(prompt) + max_new)
    model = load_engine(
        model_dir,
        args.device,
        args.dtype,
        ops,
        max_seq_len=len(prompt) + max_new,
        pdl=False if args.no_pdl else None,
        kernels=pack,
    )
    options = GenerateOptions(
        max_new_tokens=max_new,
        sampling=sampling,
        seed=seed,
        eos_token_ids=() if args.ignore_eos else model.cfg.eos_token_ids,
        use_graph=False if args.no_graph else None,
    )
    result = generate(model, [prompt], options, load_tokenizer(model_dir))
    tokens = result.tokens[0]
    text = result.text[0] if result.text is not None else None

    print(shown_text(text, tokens))
    label = "" if result.device == "cuda" else " (CPU: a correctness run, not a speed figure)"
    print(
        f"{len(prompt)} prompt + {len(tokens)} new tokens ({result.stop_reasons[0]}); "
        f"prefill {result.prefill_ms:.2f} ms; decode {result.decode_tok_s:.1f} tok/s over "
        f"{result.decode_steps} steps; warm-up {result.warmup_ms:.0f} ms; "
        f"{result.device} {result.dtype}, ops {args.ops}"
        f"{f', kernels {kernels}' if kernels is not None else ''}, "
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
            "kernels": str(kernels) if kernels is not None else None,
            "cuda_graph": result.cuda_graph,
            "model": str(args.model),
        }
        print(json.dumps(record))
    return 0
