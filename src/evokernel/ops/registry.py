"""OpSet: the engine's op names -> implementations. The Qwen3 step calls ops only by name.

  OpSet.torch()                      every op from ops/reference.py (the reference)
  OpSet.triton()                     our Triton kernels where written, the task seeds for
                                     `linear` and `decode_attention`, torch for the rest
  opset.with_candidate(name, path)   one op replaced by a candidate file's entry point
  opset.origin[name]                 where each op came from ("torch", "triton", a file path)

Signatures and shapes are in ops/reference.py; `sample` is ops/sampling.py's. A Triton
OpSet must be built after `evokernel.device.prepare(device)` (seeds define kernels on import).

`linear` candidates are decode kernels (the `decode_linear` task has few rows); products with
more than `LINEAR_MAX_ROWS` rows (prefill) go to torch's cuBLAS path instead. `logits` stays on
torch: cuBLAS already reads the lm_head near copy bandwidth (docs/performance.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from evokernel.errors import TaskError
from evokernel.ops import reference, sampling
from evokernel.ops.candidates import entry_point, load_candidate, seed_path

OP_NAMES: tuple[str, ...] = (
    "embed",
    "rms_norm",
    "linear",
    "qk_norm_rope_append",
    "decode_attention",
    "prefill_attention",
    "silu_mul",
    "residual_add",
    "logits",
    "sample",
)

LINEAR_MAX_ROWS = 16

Op = Callable[..., Any]


def decode_sized_linear(candidate: Op, max_rows: int = LINEAR_MAX_ROWS) -> Op:
    """`linear` that runs `candidate` for up to `max_rows` rows and torch beyond."""

    def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > max_rows:
            return reference.linear(x, weight)
        return candidate(x, weight)

    linear.candidate = candidate  # type: ignore[attr-defined]
    return linear


@dataclass(frozen=True)
class OpSet:
    embed: Op
    rms_norm: Op
    linear: Op
    qk_norm_rope_append: Op
    decode_attention: Op
    prefill_attention: Op
    silu_mul: Op
    residual_add: Op
    logits: Op
    sample: Op
    origin: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def torch(cls) -> OpSet:
        impls: dict[str, Op] = {n: getattr(reference, n) for n in OP_NAMES if n != "sample"}
        impls["sample"] = sampling.sample
        return cls(**impls, origin={name: "torch" for name in OP_NAMES})

    @classmethod
    def triton(cls) -> OpSet:
        from evokernel.ops import activation, norm, rope

        ops = cls.torch().replace(
            rms_norm=(norm.rms_norm, "triton"),
            residual_add=(norm.residual_add, "triton"),
            silu_mul=(activation.silu_mul, "triton"),
            qk_norm_rope_append=(rope.qk_norm_rope_append, "triton"),
        )
        for name in ("linear", "decode_attention"):
            if seed_path(name).is_file():
                ops = ops.with_candidate(name, seed_path(name))
        return ops

    @classmethod
    def named(cls, kind: str) -> OpSet:
        """`torch` or `triton` (the CLI's --ops)."""
        if kind == "torch":
            return cls.torch()
        if kind == "triton":
            return cls.triton()
        raise TaskError(f"unknown op set {kind!r} (use torch or triton)")

    def replace(self, **impls: tuple[Op, str]) -> OpSet:
        """A copy with ops replaced: name=(implementation, origin label)."""
        unknown = set(impls) - set(OP_NAMES)
        if unknown:
            raise TaskError(f"unknown op {sorted(unknown)[0]!r} (ops: {', '.join(OP_NAMES)})")
        origin = dict(self.origin)
        origin.update({name: label for name, (_, label) in impls.items()})
        fns = {name: fn for name, (fn, _) in impls.items()}
        return dataclasses.replace(self, **fns, origin=origin)

    def with_candidate(self, op_name: str, path: str | Path, entry: str | None = None) -> OpSet:
        """A copy whose `op_name` is the function `entry` (default: the task's entry point,
        else the op name) of the candidate file at `path`."""
        if op_name not in OP_NAMES:
            raise TaskError(f"unknown op {op_name!r} (ops: {', '.join(OP_NAMES)})")
        fn = load_candidate(path, entry or entry_point(op_name))
        if op_name == "linear":
            fn = decode_sized_linear(fn)
        return self.replace(**{op_name: (fn, str(path))})

    def __getitem__(self, name: str) -> Op:
        if name not in OP_NAMES:
            raise KeyError(name)
        fn: Op = getattr(self, name)
        return fn
