"""Helpers for the task tests: the documented tolerance formula, candidate loading, emulated
candidates and bit-level digests."""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from evokernel.tasks import get_task
from evokernel.tasks.base import Tolerance
from evokernel.tasks.blocks import parse_knobs, set_knobs

_loaded = itertools.count()


def errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(||out - ref|| / ||ref||, max|out - ref| / max|ref|) in float64, as `Tolerance` says."""
    diff = out.detach().cpu().double() - ref.double()
    rel_l2 = (diff.norm() / ref.double().norm()).item()
    max_abs_rel = (diff.abs().max() / ref.double().abs().max()).item()
    return rel_l2, max_abs_rel


def passes(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> bool:
    if out.shape != ref.shape or not bool(torch.isfinite(out).all()):
        return False
    rel_l2, max_abs_rel = errors(out, ref)
    return rel_l2 <= tol.rel_l2 and max_abs_rel <= tol.max_abs_rel


def load_candidate(path: Path, tmp_path: Path, knobs: dict[str, Any] | None = None) -> ModuleType:
    """Import a candidate file (with `knobs` set) as a fresh module from a copy in tmp_path:
    Triton reads kernel source from the file, so each variant needs its own file."""
    source = path.read_text()
    if knobs:
        source = set_knobs(source, knobs)
    name = f"candidate_{next(_loaded)}"
    copy = tmp_path / f"{name}.py"
    copy.write_text(source)
    spec = importlib.util.spec_from_file_location(name, copy)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def digest(inputs: dict[str, Any]) -> str:
    """SHA-256 over every tensor's bytes (NaN-safe) and every scalar, in key order."""
    h = hashlib.sha256()
    for key in sorted(inputs):
        value = inputs[key]
        h.update(key.encode())
        if isinstance(value, torch.Tensor):
            h.update(str((value.dtype, tuple(value.shape))).encode())
            h.update(value.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        else:
            h.update(repr(value).encode())
    return h.hexdigest()


def attention_in(inputs: dict[str, Any], compute: torch.dtype) -> torch.Tensor:
    """A correct attention computed from inputs rounded to `compute`, float32 accumulation,
    p and the output rounded to `compute` (what a tl.dot flash kernel does)."""
    q = inputs["q"].to(compute).float()
    k_cache = inputs["k_cache"].to(compute).float()
    v_cache = inputs["v_cache"].to(compute).float()
    B, Hq, D = q.shape
    Hkv = k_cache.shape[1]
    out = torch.empty((B, Hq, D))
    for b, n in enumerate(inputs["seq_lens"].tolist()):
        qb = q[b].view(Hkv, Hq // Hkv, D)
        s = torch.einsum("kgd,knd->kgn", qb, k_cache[b, :, :n]) * inputs["scale"]
        p = torch.exp(s - s.amax(-1, keepdim=True))
        pv = torch.einsum("kgn,knd->kgd", p.to(compute).float(), v_cache[b, :, :n])
        out[b] = (pv / p.sum(-1, keepdim=True)).reshape(Hq, D)
    return out.to(compute).to(inputs["q"].dtype)


def linear_in(inputs: dict[str, Any], compute: torch.dtype) -> torch.Tensor:
    """x @ W^T from inputs rounded to `compute`, float32 accumulation, output rounded."""
    x = inputs["x"].to(compute).float()
    w = inputs["weight"].to(compute).float()
    return (x @ w.T).to(compute).to(inputs["x"].dtype)


def knob_space(task_name: str) -> list[dict[str, Any]]:
    """Every combination of the seed's declared knob values."""
    knobs = parse_knobs(get_task(task_name).seed_candidate.read_text())
    names = [k.name for k in knobs]
    return [dict(zip(names, c)) for c in itertools.product(*(k.choices for k in knobs))]


def knob_axes(task_name: str) -> list[dict[str, Any]]:
    """The seed's own knobs, then each knob at each of its other values (the rest as seeded)."""
    knobs = parse_knobs(get_task(task_name).seed_candidate.read_text())
    seed = {k.name: k.value for k in knobs}
    return [seed, *({**seed, k.name: v} for k in knobs for v in k.choices if v != k.value)]


def knob_corners(task_name: str) -> list[dict[str, Any]]:
    """The seed's own knobs, then every combination of each knob's first and last choice."""
    knobs = parse_knobs(get_task(task_name).seed_candidate.read_text())
    names = [k.name for k in knobs]
    ends = [sorted({k.choices[0], k.choices[-1]}) for k in knobs]
    seed = {k.name: k.value for k in knobs}
    return [
        seed,
        *(c for c in (dict(zip(names, e)) for e in itertools.product(*ends)) if c != seed),
    ]
