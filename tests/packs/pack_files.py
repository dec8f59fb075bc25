"""Hand-written kernel packs and candidate programs for the pack tests (real files)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

from evokernel.cli import main
from evokernel.engine.graph import context_buckets
from evokernel.engine.packs.format import (
    FORMAT,
    FORMAT_VERSION,
    describe_device,
    shape_key,
    software_versions,
)
from evokernel.engine.packs.trust import content_hash, sign
from evokernel.model.config import ModelConfig

# A correct `decode_layer` made of the torch reference ops, counting its calls by context bound.
LAYER_PROGRAM = (Path(__file__).with_name("torch_layer_program.py")).read_text()

# A wrong one with the right interface: it drops the MLP (its output has the right type,
# shape and dtype; its values are wrong). The self-check catches it.
_MLP = "    return h + F.linear(F.silu(gate_up[..., :inter]) * gate_up[..., inter:], down_proj)\n"
assert _MLP in LAYER_PROGRAM
WRONG_PROGRAM = LAYER_PROGRAM.replace(_MLP, "    return h\n")


def write_hand_pack(
    out: Path,
    cfg: ModelConfig,
    programs: dict[int, str] | None = None,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    signed: bool = True,
    **overrides: Any,
) -> Path:
    """A pack for `cfg` on `device`: the engine's context buckets of cfg, each bucket's
    program source from `programs` (bound -> source; missing: baseline), with the programs'
    content hashes, signed with this user's (the tests') pack key unless `signed` is false.
    `overrides` replace top-level keys of pack.json (e.g. device=..., format=...)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "programs").mkdir(exist_ok=True)
    entries = []
    hashes = {}
    for bound in context_buckets(cfg.max_position_embeddings):
        source = (programs or {}).get(bound)
        program = "baseline"
        if source is not None:
            program = f"programs/layer-{bound}.py"
            (out / program).write_text(source)
            hashes[program] = content_hash((out / program).read_bytes())
        entries.append({
            "max_len": bound, "scenario": f"b1_ctx{bound}", "context": bound,
            "program": program, "program_id": None if source is None else f"p{bound}",
            "speedup": None if source is None else 1.1,
            "speedup_ci": None if source is None else [1.05, 1.15],
        })  # fmt: skip
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": "2025-01-01T00:00:00Z",
        "evokernel": "test",
        "device": describe_device(device),
        "software": software_versions(),
        "model": shape_key(cfg, dtype),
        "tasks": {"decode_layer@test": {"op": "decode_layer", "run": "", "dispatch": entries}},
        "hashes": hashes,
        "signature": sign(hashes) if signed else None,
    }
    doc.update(overrides)
    (out / "pack.json").write_text(json.dumps(doc, indent=2))
    return out


def edit_pack(pack: Path, **changes: Any) -> None:
    """Rewrite pack.json with top-level keys changed (None removes a key)."""
    doc = json.loads((pack / "pack.json").read_text())
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    (pack / "pack.json").write_text(json.dumps(doc))


def run_cli(*argv: str) -> tuple[int, str, str]:
    """`evokernel ARGV` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def program_calls(pack: Path, bound: int) -> list[int]:
    """The CALLS list of the counting program serving bucket `bound` of the hand pack at `pack`
    (the module this process imported for it: one per program text)."""
    from evokernel.engine.packs.load import read_pack
    from evokernel.engine.packs.programs import import_program

    fn = import_program(read_pack(pack), f"programs/layer-{bound}.py", "decode_layer")
    calls: list[int] = fn.__globals__["CALLS"]
    return calls
