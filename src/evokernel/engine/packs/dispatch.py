"""The op a kernel pack puts in an OpSet: `decode_layer` chosen per call by context bucket.

    ops = packed_ops(OpSet.triton(), pack)
    ops.decode_layer(h, ..., max_len)           # the pack's program for max_len's bucket,
                                                # or the op set's own decode_layer ("baseline")

`max_len` is the engine's host-side bound on the context (a Python int, the runner's bucket),
so choosing costs no device work and no sync, and a captured CUDA graph holds the program of
its own bucket. The pack's programs are imported through engine/packs/programs.py (hash, trust and
static check first; once per process; Triton's mode must be set first:
`evokernel.device.prepare`). Apply a pack last: replacing one of decode_layer's parts
afterwards re-composes decode_layer without the pack.

A quantized checkpoint's pack has no programs but launch settings (`pack.quantized`):
`quant_ops` composes, per bucket, a decode_layer whose fused ops run that bucket's
`DecodeTuning.quant` entries (a `BucketOp`, chosen by `max_len` as programs are), and gives
the other fused ops (the head) the entries every bucket shares.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from evokernel.engine.packs.format import Pack, QuantLaunch, TaskTable
from evokernel.engine.packs.programs import import_program
from evokernel.ops.candidates import entry_point

if TYPE_CHECKING:
    from evokernel.ops.registry import OpSet


class BucketOp:
    """One of `fns` per context bucket: the first whose bound >= max_len, else the last."""

    def __init__(self, bounds: list[int], fns: list[Callable[..., Any]]) -> None:
        assert bounds and len(bounds) == len(fns), (bounds, fns)
        self._bounds = bounds
        self._fns = fns
        self._chosen: dict[int, Callable[..., Any]] = {}

    def choose(self, max_len: int) -> Callable[..., Any]:
        fn = self._chosen.get(max_len)
        if fn is None:
            index = next((i for i, b in enumerate(self._bounds) if max_len <= b), -1)
            fn = self._chosen[max_len] = self._fns[index]
        return fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        max_len = kwargs["max_len"] if "max_len" in kwargs else args[-1]
        return self.choose(int(max_len))(*args, **kwargs)


class PackedOp(BucketOp):
    """`table`'s programs, one per context bucket, in front of `baseline`."""

    def __init__(self, table: TaskTable, pack: Pack, baseline: Callable[..., Any]) -> None:
        self.table = table
        self.baseline = baseline
        loaded: dict[str, Callable[..., Any]] = {}
        for e in table.entries:
            if not e.is_baseline and e.program not in loaded:
                loaded[e.program] = import_program(pack, e.program, entry_point(table.op))
        fns = [baseline if e.is_baseline else loaded[e.program] for e in table.entries]
        super().__init__([e.max_len for e in table.entries], fns)

    def program(self, max_len: int) -> str:
        """What serves bound `max_len`: a program path (relative to the pack) or "baseline"."""
        return self.table.entry_for(max_len).program


def quant_ops(ops: OpSet, launch: QuantLaunch, label: str) -> OpSet:
    """`ops` running a quantized checkpoint's kept launch choices: each bucket's decode_layer
    composed of fused ops under that bucket's `DecodeTuning.quant` entries, the other fused
    ops (the head) under the entries every bucket shares."""
    base = ops.retuned(label, quant=launch.shared_entries())
    tables = launch.bucket_entries()
    layers = [ops.retuned(label, quant=entries).decode_layer for _, entries in tables]
    return base.replace(decode_layer=(BucketOp([b for b, _ in tables], layers), label))


def packed_ops(ops: OpSet, pack: Pack) -> OpSet:
    """`ops` with each op the pack has a table for dispatched through it. Its origin becomes
    "pack:<dir>" where at least one bucket runs a program; a table of baselines only leaves
    the op as it was. A quantized checkpoint's launch choices (`pack.quantized`, when kept)
    go into the fused decode ops' `DecodeTuning.quant` first, per bucket (`quant_ops`)."""
    if pack.quantized is not None and pack.quantized.runs:
        label = f"{ops.origin.get('norm_linear', 'triton')}, launches of pack:{pack.path}"
        ops = quant_ops(ops, pack.quantized, label)
    for table in pack.tasks.values():
        if all(e.is_baseline for e in table.entries):
            continue
        op = PackedOp(table, pack, ops[table.op])
        ops = ops.replace(**{table.op: (op, f"pack:{pack.path}")})
    return ops
