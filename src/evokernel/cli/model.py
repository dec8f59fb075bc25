"""`evokernel model`: write random checkpoints, and check and describe checkpoint directories.

    evokernel model random OUT_DIR [--preset qwen3-0.6b|tiny|...] [--seed N] [--dtype D]
        [--layers N] [--heads N] [--kv-heads N] [--head-dim N] [--hidden N]
        [--intermediate N] [--vocab N] [--untied] [--shards N]
        [--config-layout transformers5|legacy] [--no-tokenizer] [--json]
    evokernel model info DIR [--skip-values] [--json]

`--json` ends stdout with one JSON line (the checkpoint summary of `model info`).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from evokernel.cli import args as checked

ORDER = 10


def register(sub: argparse._SubParsersAction) -> None:
    from evokernel.model.presets import PRESETS

    p = sub.add_parser(
        "model",
        help="write random checkpoints; check and describe checkpoints",
        description="Write random-weight checkpoints and check checkpoint directories.",
    )
    verbs = p.add_subparsers(dest="model_verb", metavar="ACTION")
    verbs.required = True

    r = verbs.add_parser(
        "random",
        help="write a random-weight checkpoint in Hugging Face layout",
        description=(
            "Write config.json, generation_config.json, model.safetensors (or shards and "
            "model.safetensors.index.json) and a byte-level tokenizer, with random weights "
            "scaled so that logits are far from flat (see docs/model.md). Shape flags "
            "override the preset's values."
        ),
    )
    r.add_argument(
        "out_dir",
        metavar="OUT_DIR",
        help="directory to write: new, empty, or holding a checkpoint this command wrote",
    )
    r.add_argument(
        "--preset",
        choices=tuple(PRESETS),
        default="qwen3-0.6b",
        help="model family and shapes (default: qwen3-0.6b; tiny, tiny-qwen2 and tiny-llama "
        "are for CPU tests)",
    )
    r.add_argument("--seed", default=0, metavar="N", help="weights seed in [0, 2**63) (default 0)")
    r.add_argument(
        "--dtype",
        choices=("bfloat16", "float16", "float32"),
        default="bfloat16",
        help="dtype of the weights on disk (default bfloat16)",
    )
    for flag, help_text in (
        ("--layers", "number of decoder layers"),
        ("--heads", "query heads"),
        ("--kv-heads", "key/value heads (must divide --heads)"),
        ("--head-dim", "per-head dimension (even)"),
        ("--hidden", "hidden size"),
        ("--intermediate", "MLP intermediate size"),
        ("--vocab", "vocabulary size (at least 259: bytes + special tokens)"),
    ):
        r.add_argument(flag, metavar="N", help=help_text + " (a positive integer)")
    r.add_argument("--untied", action="store_true", help="write a separate lm_head.weight")
    r.add_argument(
        "--shards", default=1, metavar="N", help="split weights over N >= 1 files + index"
    )
    r.add_argument(
        "--config-layout",
        choices=("transformers5", "legacy"),
        default="transformers5",
        help="config.json layout: rope_parameters/dtype (transformers 5), or "
        "rope_theta/rope_scaling/torch_dtype (legacy, as on the hub)",
    )
    r.add_argument("--no-tokenizer", action="store_true", help="skip tokenizer.json")
    r.add_argument("--json", action="store_true", help="end stdout with one JSON line")
    r.set_defaults(func=run_random)

    i = verbs.add_parser(
        "info",
        help="check a checkpoint directory and print its summary",
        description=(
            "Check config.json, every safetensors header, name, shape and dtype, and every "
            "tensor's values for NaN and Inf, then print the architecture, sizes, tied/untied "
            "head and files. Exit 0 only if it loads."
        ),
    )
    i.add_argument("model_dir", metavar="DIR", help="checkpoint directory")
    i.add_argument(
        "--skip-values",
        action="store_true",
        help="do not read tensor values (the NaN/Inf scan reads every byte of the weights: "
        "seconds per GB); headers and config only",
    )
    i.add_argument("--json", action="store_true", help="end stdout with one JSON line")
    i.set_defaults(func=run_info)


def run_random(args: argparse.Namespace) -> int:
    from evokernel.model.checkpoint import inspect_checkpoint
    from evokernel.model.random import MAX_LAYERS, write_random_checkpoint

    out_dir = checked.output_dir(args.out_dir, "OUT_DIR")
    seed = checked.seed(args.seed)
    overrides: dict[str, Any] = {
        key: checked.integer(value, flag, lo=1, hi=MAX_LAYERS if key == "layers" else None)
        for key, flag, value in (
            ("layers", "--layers", args.layers),
            ("heads", "--heads", args.heads),
            ("kv_heads", "--kv-heads", args.kv_heads),
            ("head_dim", "--head-dim", args.head_dim),
            ("hidden", "--hidden", args.hidden),
            ("intermediate", "--intermediate", args.intermediate),
            ("vocab", "--vocab", args.vocab),
        )
        if value is not None
    }
    start = time.perf_counter()
    out = write_random_checkpoint(
        out_dir,
        preset=args.preset,
        seed=seed,
        dtype=args.dtype,
        untied=args.untied,
        shards=checked.integer(args.shards, "--shards", lo=1),
        layout=args.config_layout,
        tokenizer=not args.no_tokenizer,
        **overrides,
    )
    seconds = time.perf_counter() - start
    summary = inspect_checkpoint(out).summary()
    print(
        f"wrote {out}: preset {args.preset}, seed {seed}, "
        f"{summary['num_parameters'] / 1e6:.1f}M parameters, "
        f"{_size(summary['file_bytes'])} in {len(summary['shards'])} file(s), "
        f"{seconds:.1f} s"
    )
    if args.json:
        print(json.dumps(summary | {"preset": args.preset, "seed": seed}))
    return 0


def run_info(args: argparse.Namespace) -> int:
    from evokernel.model.checkpoint import inspect_checkpoint
    from evokernel.model.finite import check_files

    ckpt = inspect_checkpoint(checked.existing_dir(args.model_dir, "DIR"))
    if not args.skip_values:
        check_files(ckpt)
    from evokernel.engine.quant_verify import quantization_label

    s = ckpt.summary() | {
        "values_checked": not args.skip_values,
        "quantization": quantization_label(ckpt.cfg),
    }
    dtypes = ", ".join(f"{k}: {v} tensors" for k, v in s["disk_dtypes"].items())
    eos = ", ".join(map(str, s["eos_token_ids"])) or "none"
    files = ", ".join(s["shards"]) + (f" (index {s['index']})" if s["index"] else "")
    print(f"checkpoint  {s['model_dir']}")
    print(
        f"model       {s['model_type']}: {s['num_hidden_layers']} layers, "
        f"hidden {s['hidden_size']}, intermediate {s['intermediate_size']}, vocab {s['vocab_size']}"
    )
    print(
        f"attention   {s['num_attention_heads']} q heads, {s['num_key_value_heads']} kv heads "
        f"(GQA {s['gqa_ratio']}:1), head_dim {s['head_dim']}, rope theta {s['rope_theta']:g}, "
        f"rms eps {s['rms_norm_eps']:g}, max positions {s['max_position_embeddings']}"
    )
    scaling = s["rope_scaling"]
    print(
        f"family      q/k/v bias {'yes' if s['qkv_bias'] else 'no'}, q/k norm "
        f"{'yes' if s['qk_norm'] else 'no'}, rope scaling "
        + (f"{scaling['rope_type']} x{scaling['factor']:g}" if scaling else "none")
    )
    print(
        f"weights     {s['num_parameters'] / 1e6:.1f}M parameters, "
        f"{_size(s['weight_bytes'])} ({dtypes}); lm_head {s['lm_head']}"
    )
    if s["quantization"]:
        print(f"quantized   {s['quantization']}")
    print(f"files       {len(s['shards'])}: {files}, {s['file_bytes']} bytes in all")
    print(f"values      {'all finite' if s['values_checked'] else 'not read (--skip-values)'}")
    if s["ignored_tensors"]:
        print(f"ignored     {len(s['ignored_tensors'])} tensors: {s['ignored_tensors'][0]}, ...")
    print(
        f"tokens      bos {s['bos_token_id']}, eos {eos}; "
        f"tokenizer.json {'present' if s['tokenizer'] else 'absent'}"
    )
    if args.json:
        print(json.dumps(s))
    return 0


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3f} {unit}"
    return f"{n} B"
