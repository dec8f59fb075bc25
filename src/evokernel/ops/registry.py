"""OpSet: the engine's op names -> implementations. The Qwen3 step calls ops only by name.

  OpSet.torch()                      every plain op from ops/reference.py (the reference), the
                                     fused decode ops as their compositions (ops/compose.py)
  OpSet.triton(pdl=None)             our Triton kernels where written (the fused decode-step
                                     kernels of ops/decode.py and the embedding gather among
                                     them, launched with programmatic dependent launch when
                                     `pdl`, by default on sm_90+ GPUs), the task seeds for
                                     `linear` and `decode_attention`, torch for the rest
  opset.with_candidate(name, path)   one op replaced by a candidate file's entry point
  opset.retuned(**fields)            the fused decode ops with `DecodeTuning` fields replaced
  opset.origin[name]                 where each op came from ("torch", "triton", "triton+pdl",
                                     a file path, "pack:<dir>", or "composed" for a fused op
                                     built from plain ops that are not all torch)

`decode_layer` (one decoder layer's decode step, the `decode_layer` task's entry point) is the
composition of the four per-layer fused ops (ops/compose.py) in every op set, so it computes
exactly what they do; its origin is theirs when they share one ("torch", "triton+pdl"), else
"composed". A candidate or a pack replaces it whole.

Plain ops (`PLAIN_OPS`) serve prefill and are the parts of the fused ops (`FUSED_OPS`) that
decode calls. Replacing a plain op re-composes every fused op containing it from the new set
(unless the same call replaces the fused op too), so a candidate for `linear` or
`decode_attention` runs in decode as well. Signatures and shapes are in ops/reference.py and
ops/compose.py; `sample` is ops/sampling.py's. A Triton OpSet must be built after
`evokernel.device.prepare(device)` (seeds define kernels on import).

`linear` candidates are decode kernels (the `decode_linear` task has few rows); products with
more than `LINEAR_MAX_ROWS` rows (prefill) go to torch's cuBLAS path instead. `logits` stays on
torch: cuBLAS already reads the lm_head near copy bandwidth (docs/performance.md).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from evokernel import device as devices
from evokernel.errors import TaskError
from evokernel.model.weights import Weight
from evokernel.ops import reference, sampling
from evokernel.ops.candidates import entry_point, load_candidate, seed_path
from evokernel.ops.compose import LAYER_PARTS, PARTS, composed
from evokernel.ops.tuning import DEFAULT, DecodeTuning, check_tuning

PLAIN_OPS: tuple[str, ...] = (
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
FUSED_OPS: tuple[str, ...] = tuple(PARTS)  # decode_layer last: it is made of the others
KERNEL_OPS: tuple[str, ...] = tuple(n for n in FUSED_OPS if n != "decode_layer")  # ops/decode.py
OP_NAMES: tuple[str, ...] = PLAIN_OPS + FUSED_OPS

LINEAR_MAX_ROWS = 16

Op = Callable[..., Any]


def decode_sized_linear(candidate: Op, max_rows: int = LINEAR_MAX_ROWS) -> Op:
    """`linear` that runs `candidate` (the `decode_linear` interface: dense weights, no bias)
    for up to `max_rows` rows and torch beyond; a packed weight goes to its format's launcher
    (ops/quant.py); a bias is added to the rounded output."""

    def linear(x: torch.Tensor, weight: Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
        if not isinstance(weight, torch.Tensor):  # a packed format: its own launcher
            from evokernel.ops import quant

            y = quant.linear(x, weight)
            return y if bias is None else (y.float() + bias.float()).to(y.dtype)
        if x.shape[0] > max_rows:
            return reference.linear(x, weight, bias)
        y = candidate(x, weight)
        return y if bias is None else (y.float() + bias.float()).to(y.dtype)

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
    norm_linear: Op
    linear_residual: Op
    norm_gate_up_silu: Op
    decode_attention_qkv: Op
    norm_logits: Op
    greedy_head: Op
    decode_layer: Op
    origin: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def torch(cls) -> OpSet:
        impls: dict[str, Op] = {n: getattr(reference, n) for n in PLAIN_OPS if n != "sample"}
        impls["sample"] = sampling.sample
        impls.update({name: _unset for name in FUSED_OPS})
        ops = cls(**impls, origin={name: "torch" for name in PLAIN_OPS})
        return ops._recompose(set(FUSED_OPS))

    @classmethod
    def triton(cls, pdl: bool | None = None, tuning: DecodeTuning | None = None) -> OpSet:
        """`pdl` None: programmatic dependent launch where supported (CUDA sm_90+);
        `tuning`: launch choices of the fused decode kernels (its `pdl` is overridden)."""
        from evokernel.ops import activation, decode, embedding, norm, rope

        use_pdl = pdl_supported() if pdl is None else pdl
        bound = check_tuning((tuning or DEFAULT)._replace(pdl=use_pdl))
        label = "triton+pdl" if use_pdl else "triton"
        ops = cls.torch().replace(
            embed=(functools.partial(embedding.embed, pdl=use_pdl), label),
            rms_norm=(norm.rms_norm, "triton"),
            residual_add=(norm.residual_add, "triton"),
            silu_mul=(activation.silu_mul, "triton"),
            qk_norm_rope_append=(rope.qk_norm_rope_append, "triton"),
        )
        for name in ("linear", "decode_attention"):
            if seed_path(name).is_file():
                ops = ops.with_candidate(name, seed_path(name))
        return ops.replace(
            **{name: (functools.partial(getattr(decode, name), tuning=bound), label)
               for name in KERNEL_OPS}
        )  # fmt: skip

    @classmethod
    def named(cls, kind: str, pdl: bool | None = None) -> OpSet:
        """`torch` or `triton` (the CLI's --ops); `pdl` as for `triton`."""
        if kind == "torch":
            return cls.torch()
        if kind == "triton":
            return cls.triton(pdl)
        raise TaskError(f"unknown op set {kind!r} (use torch or triton)")

    def replace(self, **impls: tuple[Op, str]) -> OpSet:
        """A copy with ops replaced: name=(implementation, origin label). Fused ops containing
        a replaced plain op are re-composed unless also given here."""
        unknown = set(impls) - set(OP_NAMES)
        if unknown:
            raise TaskError(f"unknown op {sorted(unknown)[0]!r} (ops: {', '.join(OP_NAMES)})")
        origin = dict(self.origin)
        origin.update({name: label for name, (_, label) in impls.items()})
        fns = {name: fn for name, (fn, _) in impls.items()}
        stale = {f for f, parts in PARTS.items() if f not in impls and set(parts) & set(impls)}
        return dataclasses.replace(self, **fns, origin=origin)._recompose(stale)

    def _recompose(self, names: set[str]) -> OpSet:
        if not names:
            return self
        origin = dict(self.origin)
        fns = {}
        new = dataclasses.replace(self)  # composed ops look their parts up on this copy
        for name in (n for n in FUSED_OPS if n in names):  # decode_layer after its parts
            fns[name] = composed(new, name)
            if name == "decode_layer":
                labels = {origin.get(part) for part in LAYER_PARTS}
                origin[name] = str(labels.pop()) if len(labels) == 1 else "composed"
                continue
            torch_only = all(origin.get(part) == "torch" for part in PARTS[name])
            origin[name] = "torch" if torch_only else "composed"
        object.__setattr__(new, "origin", origin)
        for name, fn in fns.items():
            object.__setattr__(new, name, fn)
        return new

    def retuned(self, label: str | None = None, **fields: Any) -> OpSet:
        """A copy whose fused decode ops of ops/decode.py (as `triton` binds them) run with
        these `DecodeTuning` fields replaced (checked), their origin `label` when given; ops
        from elsewhere are unchanged."""
        impls: dict[str, tuple[Op, str]] = {}
        for name in KERNEL_OPS:
            fn = getattr(self, name)
            if isinstance(fn, functools.partial) and "tuning" in fn.keywords:
                tuning = check_tuning(fn.keywords["tuning"]._replace(**fields))
                bound = functools.partial(fn.func, *fn.args, **{**fn.keywords, "tuning": tuning})
                impls[name] = (bound, label or self.origin.get(name, "triton"))
        return self.replace(**impls) if impls else self

    def decode_tuning(self) -> DecodeTuning | None:
        """The `DecodeTuning` the fused decode ops run with (as `triton` or `retuned` bind it),
        or None where they are not ops/decode.py's."""
        fn = self.norm_linear
        if isinstance(fn, functools.partial) and "tuning" in fn.keywords:
            tuning: DecodeTuning = fn.keywords["tuning"]
            return tuning
        return None

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


def _unset(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("fused op used before it was composed")


def pdl_supported() -> bool:
    """Programmatic dependent launch needs a compiled (not interpreted) sm_90+ CUDA device."""
    if devices.interpreted() or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability()[0] >= 9
