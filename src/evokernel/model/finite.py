"""Weights must be finite: a NaN or Inf anywhere makes every logit NaN, and greedy decoding
then emits token 0 forever without an error.

Two checks, both one reduction per tensor: `tensor.sum()`, which propagates NaN and Inf. It
runs in the tensor's own dtype (float32 accumulation inside), so it allocates nothing the size
of the tensor; a finite tensor whose sum overflows the dtype (beyond 65504 in float16) is
cleared by the exact recheck below.

  * `FiniteCheck`, run by the loader on the device: each tensor's sum is queued as it is
    copied and all are read back at the end (one host sync for the whole model). It sees the
    values as loaded, so it also catches finite values that overflow the load dtype (a
    float32 1e5 becomes inf in float16).
  * `nonfinite_in_files(ckpt)`, run by `evokernel model info`: the stored values, read from
    the memory-mapped files in 64 MB slices whose pages are dropped as it goes.

Either way a flagged tensor is rechecked exactly (`torch.isfinite`) and reported by name.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from evokernel.errors import CheckpointError
from evokernel.model.checkpoint import Checkpoint
from evokernel.model.safetensors_io import Header, TensorEntry, TensorMap

SLICE_BYTES = 64 << 20


class FiniteCheck:
    """Collects per-tensor sums on the device; `verify()` raises for non-finite tensors."""

    def __init__(self) -> None:
        self._names: list[str] = []
        self._tensors: list[torch.Tensor] = []
        self._sums: list[torch.Tensor] = []

    def add(self, name: str, t: torch.Tensor) -> None:
        self._names.append(name)
        self._tensors.append(t)
        self._sums.append(t.sum())

    def verify(self, ckpt: Checkpoint) -> None:
        if not self._sums:
            return
        ok = torch.isfinite(torch.stack(self._sums)).tolist()  # the one host sync
        flagged = [k for k, good in enumerate(ok) if not good]
        bad = [k for k in flagged if not bool(torch.isfinite(self._tensors[k]).all())]
        if not bad:
            return
        names = [self._names[k] for k in bad]
        dtype = str(self._tensors[bad[0]].dtype).removeprefix("torch.")
        stored = set(nonfinite_in_files(ckpt, names[:1]))
        why = "holds NaN or Inf" if stored else f"overflows {dtype} (finite in the file)"
        raise CheckpointError(_message(ckpt, names, why))


def nonfinite_in_files(ckpt: Checkpoint, names: list[str] | None = None) -> list[str]:
    """Names of the tensors (all the model uses, or `names`) whose stored values hold NaN
    or Inf, in file order."""
    wanted = _sources(ckpt)
    if names is not None:
        wanted = {n: wanted[n] for n in names}
    found = []
    for header in ckpt.headers:
        entries = sorted((e for h, e in wanted.values() if h is header), key=lambda e: e.begin)
        if not entries:
            continue
        tmap = TensorMap(header)
        try:
            found += [e.name for e in entries if not _finite_stored(tmap, e)]
        finally:
            tmap.close()
    return found


def check_files(ckpt: Checkpoint) -> None:
    """Raise a one-line CheckpointError naming the tensors whose stored values are not finite."""
    names = nonfinite_in_files(ckpt)
    if names:
        raise CheckpointError(_message(ckpt, names, "holds NaN or Inf"))


def _sources(ckpt: Checkpoint) -> dict[str, tuple[Header, TensorEntry]]:
    sources = dict(ckpt.tensors)
    if ckpt.stored_head is not None:
        sources["lm_head.weight"] = ckpt.stored_head
    return sources


def _finite_stored(tmap: TensorMap, e: TensorEntry) -> bool:
    for r0, r1, part in _slices(tmap, e):
        if part.dtype.itemsize == 1 and part.is_floating_point():  # float8: no sum on the CPU
            part = part.float()
        good = bool(torch.isfinite(part.sum())) or bool(torch.isfinite(part).all())
        tmap.release(e.name, (r0, r1))
        if not good:
            return False
    return True


def _slices(tmap: TensorMap, e: TensorEntry) -> Iterator[tuple[int, int, torch.Tensor]]:
    view = tmap.view(e.name)
    if view.dim() == 0 or view.shape[0] == 0:
        yield 0, 0, view
        return
    rows = view.shape[0]
    step = max(1, SLICE_BYTES // max(1, e.nbytes // rows))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        yield r0, r1, view[r0:r1]


def _message(ckpt: Checkpoint, names: list[str], why: str) -> str:
    header, _ = _sources(ckpt)[names[0]]
    text = f"{header.path}: tensor {names[0]!r} {why}"
    if len(names) > 1:
        shown = ", ".join(names[1:4]) + (", ..." if len(names) > 4 else "")
        text += f" (and {len(names) - 1} more: {shown})"
    return text
