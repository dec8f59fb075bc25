"""`evokernel quantize`: write a dense checkpoint as a weight-only quantized one, in a
published layout that the engine and other loaders read (model/quant/write.py).

    evokernel quantize --model DIR --out DIR --format fp8|int8|int4 [--group-size N]
        [--head bf16|int8|int4|fp8] [--layout gptq|awq|compressed-tensors|autofp8] [--asym]
        [--shard-gb X] [--json]

Round to nearest, no calibration. fp8: Qwen's block FP8 (128x128 scales); int8 and int4:
GPTQ (v1, symmetric unless --asym; --group-size default 128, -1 for one group per row), or
AWQ's GEMM layout for int4 (--layout awq). --layout compressed-tensors writes any of them as
llm-compressor does (pack-quantized ints, FP8 blocks); --layout autofp8 writes fp8 with one
scale a module, as AutoFP8 does (vLLM reads it). --head bf16 keeps the head dense in
the checkpoint's dtype (tied if it was); int8 or int4 (GPTQ, compressed-tensors) and fp8
(FP8) quantize it on its own, the embedding staying dense. The tokenizer, chat template and
generation config are copied. `--json` ends stdout with one JSON line (the summary).
"""

from __future__ import annotations

import argparse
import json
import time

from evokernel.cli import args as checked

ORDER = 15
# quantization_config keys the summary line names (a compressed-tensors body's group's)
SUMMARY_KEYS = (
    "format", "bits", "num_bits", "strategy", "group_size", "sym", "symmetric",
    "block_structure", "weight_block_size", "lm_head", "dynamic", "activation_scheme",
)  # fmt: skip
CT_KEYS = ("num_bits", "strategy", "group_size", "symmetric", "block_structure")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quantize",
        help="write a weight-only quantized checkpoint (FP8, GPTQ int8/int4, AWQ int4)",
        description=(
            "Quantize a dense checkpoint's projections by round to nearest and write them in "
            "a published layout (Qwen's FP8 blocks, GPTQ, AWQ GEMM, compressed-tensors, "
            "AutoFP8's per-tensor FP8), with config, tokenizer and chat template copied. The "
            "head's format is your choice (--head): it is a quarter of Qwen3-0.6B's bytes."
        ),
    )
    p.add_argument("--model", required=True, metavar="DIR", help="dense checkpoint directory")
    p.add_argument("--out", required=True, metavar="DIR", help="new or empty output directory")
    p.add_argument("--format", required=True, choices=("fp8", "int8", "int4"))
    p.add_argument(
        "--group-size",
        metavar="N",
        help="int8/int4: input columns per scale, a multiple of 4 (int8) or 8 (int4), or -1 "
        "for one scale per row (default 128)",
    )
    p.add_argument(
        "--head",
        choices=("bf16", "int8", "int4", "fp8"),
        default="bf16",
        help="the lm_head: bf16 = dense in the checkpoint's dtype (default); int8 or int4 "
        "with --format int8/int4 (gptq); fp8 with --format fp8",
    )
    p.add_argument(
        "--layout",
        choices=("gptq", "awq", "compressed-tensors", "autofp8"),
        help="int8/int4: gptq (default), awq (int4, bf16 head only) or compressed-tensors "
        "(llm-compressor's pack-quantized); fp8: Qwen's FP8 blocks (default), "
        "compressed-tensors, or autofp8 (one scale a module, as AutoFP8 writes and vLLM "
        "reads it)",
    )
    p.add_argument(
        "--asym", action="store_true", help="gptq, compressed-tensors: asymmetric zero points"
    )
    p.add_argument("--shard-gb", default="4", metavar="X", help="largest file, GB (default 4)")
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evokernel.model.quant.write import QuantizeOptions, write_quantized

    model = checked.existing_dir(args.model, "--model")
    out = checked.output_dir(args.out, "--out")
    group = None if args.group_size is None else checked.integer(args.group_size, "--group-size")
    shard = checked.real(args.shard_gb, "--shard-gb", 0.0, lo_open=True)
    opts = QuantizeOptions(
        format=args.format,
        head=args.head,
        group_size=group,
        layout=args.layout,
        sym=not args.asym,
        shard_bytes=max(1, int(shard * 1e9)),
    )
    start = time.perf_counter()
    summary = write_quantized(model, out, opts)
    seconds = time.perf_counter() - start
    qc = summary["quantization_config"]
    fields = qc
    if "config_groups" in qc:  # compressed-tensors: the format and the body's weights
        weights = qc["config_groups"]["group_0"]["weights"]
        fields = {"format": qc["format"], **{k: weights[k] for k in CT_KEYS}}
    detail = ", ".join(
        f"{k} {json.dumps(fields[k])}" for k in SUMMARY_KEYS if fields.get(k) is not None
    )
    print(
        f"wrote {summary['out_dir']}: {opts.format} as {summary['layout']} ({detail}), head "
        f"{opts.head}; read per decode step {summary['source_step_bytes'] / 1e6:.1f} MB -> "
        f"{summary['step_bytes'] / 1e6:.1f} MB; on disk {summary['weight_bytes'] / 1e6:.1f} MB "
        f"in {len(summary['files'])} file(s); round to nearest; {seconds:.1f} s"
    )
    if args.json:
        print(json.dumps(summary))
    return 0
