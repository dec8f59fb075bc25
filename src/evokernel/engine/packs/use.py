"""The one way an engine takes a kernel pack: read it, trust it, import it, self-check it.

    pack = open_pack(PACK_DIR, cfg, device, dtype, engine_layer, max_len=N,
                     policy=PackPolicy(trust_unsigned=False, strict=False))
    model = load_engine(model_dir, device, dtype, ops, kernels=pack)

Steps, each refusal one PackError line (exit 2 on the CLI):
  1. `load_pack`: pack.json's structure, and its fit to this GPU model, checkpoint shape and
     dtype (engine/packs/load.py);
  2. trust: signed with this user's key, or `policy.trust_unsigned` (`--trust-kernels`, one
     note line on stderr says so), or no program at all (engine/packs/trust.py);
  3. every program the tables name: its content hash, the evaluator's static check, a
     guarded import (engine/packs/programs.py);
  4. the self-check of every bucket an engine of context `max_len` can reach (None: every
     bucket): a program that disagrees with the reference falls back to the engine's layer
     with one warning line, or stops the run under `policy.strict` (`--strict-kernels`);
     a summary line with its cost follows (engine/packs/selfcheck.py).
The returned Pack has `trust` set and the failed buckets put back to the baseline; give it
to `load_engine` (or `dispatch.packed_ops`), which then dispatches to the imported programs.

`load_engine(kernels=...)` calls this too, without a policy: an admitted Pack is returned as
it is, and a directory this process already opened (same pack.json, device and dtype, a
`max_len` it covered) gets that outcome again, so the user's flags and the self-check's
fallbacks hold for every engine a command loads from the pack (bench decode loads two)
without checking twice. Any other directory is opened with the default policy. `generate`,
`verify`, `bench decode` (and `serve`) call it first with the user's flags, before any
weight loads.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from evokernel.engine.packs.format import Pack, dtype_name
from evokernel.engine.packs.load import load_pack
from evokernel.engine.packs.programs import import_program
from evokernel.engine.packs.selfcheck import self_check, warnings
from evokernel.engine.packs.trust import FLAG, FLAGGED, decide
from evokernel.model.config import ModelConfig


@dataclass(frozen=True)
class PackPolicy:
    trust_unsigned: bool = False  # --trust-kernels: run a pack this user's tune did not sign
    strict: bool = False  # --strict-kernels: a self-check disagreement stops the run


@dataclass
class _Opened:
    doc: dict[str, Any]  # pack.json as read
    max_len: int | None  # the contexts the self-check covered (None: all)
    pack: Pack  # the admitted pack


_OPENED: dict[tuple[str, str, str], _Opened] = {}


def open_pack(
    kernels: str | Path | Pack,
    cfg: ModelConfig,
    device: str,
    dtype: torch.dtype,
    engine_layer: Callable[..., Any],
    *,
    max_len: int | None = None,
    policy: PackPolicy | None = None,
    notes: Callable[[str], None] | None = None,
) -> Pack:
    """The pack at `kernels` admitted for an engine of `cfg` on `device` in `dtype` whose own
    decode layer is `engine_layer` (see the module doc); `notes` takes the note, warning and
    summary lines (default: stderr)."""
    from evokernel.ops.candidates import entry_point

    if isinstance(kernels, Pack) and kernels.trust is not None:
        return kernels
    pack = kernels if isinstance(kernels, Pack) else load_pack(kernels, cfg, device, dtype)
    key = (str(pack.path.resolve()), device, dtype_name(dtype))
    seen = _OPENED.get(key)
    if policy is None and seen is not None and _covers(seen, pack, max_len):
        return seen.pack
    policy = policy or PackPolicy()
    say = notes or _stderr
    trust = decide(pack, policy.trust_unsigned)
    admitted = dataclasses.replace(pack, trust=trust)
    functions: dict[str, Callable[..., Any]] = {}
    for table in admitted.tasks.values():
        for entry in table.entries:
            if not entry.is_baseline and entry.program not in functions:
                functions[entry.program] = import_program(
                    admitted, entry.program, entry_point(table.op)
                )
    lines = []
    if trust == FLAGGED:
        lines.append(
            f"note: kernel pack {pack.path} is not signed by this user's key; its programs run "
            f"because of {FLAG}"
        )
    if functions:
        result = self_check(
            admitted, cfg, device, dtype, engine_layer, functions, max_len, policy.strict
        )
        lines += [f"warning: {line}" for line in warnings(admitted, result)]
        if result.checks:
            lines.append(result.summary(admitted))
        admitted = result.apply(admitted)
    for line in lines:  # once admitted: a refusal stays the only line
        say(line)
    _OPENED[key] = _Opened(pack.to_dict(), max_len, admitted)
    return admitted


def _covers(seen: _Opened, pack: Pack, max_len: int | None) -> bool:
    """Whether an earlier outcome holds for `pack` (the same pack.json) at `max_len`."""
    if seen.doc != pack.to_dict():
        return False
    return seen.max_len is None or (max_len is not None and max_len <= seen.max_len)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


__all__ = ["PackPolicy", "open_pack"]
