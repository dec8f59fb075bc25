"""Read a kernel pack and refuse one that does not belong here, with a one-line reason.

    pack = load_pack(pack_dir, cfg, device, dtype)

Refused (`PackError`, exit 2 on the CLI): a directory without a readable pack.json; another
format or format version; malformed keys; an unknown dtype; a pack from another GPU model
(device names compared; a CPU pack on a GPU and the reverse too); another model shape (hidden,
heads, kv heads, head_dim, intermediate); a dtype other than the engine's (when `dtype` is
given); a dispatch table whose bounds do not ascend; a program file that is missing or lies
outside the pack; malformed `hashes` or `signature`; a `quantized` section whose choices are
malformed or outside ops/tuning.py's closed sets (`check_tuning`). pack.json is read only
when it is a regular file (a FIFO there is refused, never opened for reading). Programs are
not imported here, nor is trust decided: packs.use.open_pack does both (engine/packs/trust.py,
programs.py).
"""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path
from typing import Any

import torch

from evokernel.engine.packs.format import (
    DTYPES,
    FORMAT,
    FORMAT_VERSION,
    PACK_FILE,
    SHAPE_KEYS,
    Pack,
    PackEntry,
    PackError,
    QuantChoice,
    QuantLaunch,
    TaskTable,
    describe_device,
    describe_shape,
    dtype_name,
    family_of,
    shape_key,
    task_op,
)
from evokernel.engine.packs.trust import is_content_hash
from evokernel.files import FileRefused, kind, read_regular
from evokernel.model.config import ModelConfig


def load_pack(
    path: str | Path, cfg: ModelConfig, device: str, dtype: torch.dtype | str | None = None
) -> Pack:
    """The pack in directory `path`, checked against the checkpoint `cfg`, this machine's
    `device` ("cuda" | "cpu") and, when given, the engine's `dtype`."""
    pack = read_pack(path)
    where = f"kernel pack {pack.path}"
    here = describe_device(device)
    if pack.device.get("name") != here["name"]:
        raise PackError(
            f"{where} was tuned on {_device_text(pack.device)}; this machine runs "
            f"{_device_text(here)}: tune a pack here (evokernel tune)"
        )
    want = shape_key(cfg, pack.model["dtype"])
    mismatch = family_of(pack.model) != family_of(want)
    if mismatch or any(pack.model.get(k) != want[k] for k in SHAPE_KEYS):
        raise PackError(
            f"{where} is for a model with {describe_shape(pack.model)}; this checkpoint has "
            f"{describe_shape(want)}"
        )
    if dtype is not None and dtype_name(dtype) != pack.model["dtype"]:
        raise PackError(
            f"{where} was tuned for {pack.model['dtype']}; the engine runs {dtype_name(dtype)} "
            f"(pass --dtype {pack.model['dtype']})"
        )
    return pack


def read_pack(path: str | Path) -> Pack:
    """Parse and check pack.json in `path` (its own consistency, not its fit to a model)."""
    root = Path(path)
    where = f"kernel pack {root}"
    if not root.is_dir():
        raise PackError(f"{where}: no such directory")
    file = root / PACK_FILE
    try:
        text = read_regular(file).decode("utf-8")
    except FileNotFoundError:
        raise PackError(f"{where}: no {PACK_FILE} (write one with evokernel tune)") from None
    except FileRefused as err:
        raise PackError(f"{where}: {err}") from None
    except UnicodeDecodeError as err:
        raise PackError(f"{where}: cannot read {PACK_FILE}: {_reason(err)}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise PackError(f"{where}: {PACK_FILE} is not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise PackError(f"{where}: {PACK_FILE} is not a JSON object")
    fmt, version = doc.get("format"), doc.get("format_version")
    if fmt != FORMAT or version != FORMAT_VERSION:
        raise PackError(
            f"{where}: unknown format {fmt!r} version {version!r} (this evokernel reads "
            f"{FORMAT!r} version {FORMAT_VERSION})"
        )
    check = _Checker(where)
    device = check.obj(doc, "device")
    check.string(device, "name", "device")
    software = check.obj(doc, "software")
    model = check.obj(doc, "model")
    for key in SHAPE_KEYS:
        value = model.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise PackError(f"{where}: model.{key} must be a positive integer, got {value!r}")
    for key, value in family_of(model).items():
        if not isinstance(value, str) or not value:
            raise PackError(f"{where}: model.{key} must be a name, got {value!r}")
    dtype = model.get("dtype")
    if dtype not in DTYPES:
        raise PackError(f"{where}: unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
    tasks = {}
    seen_ops: dict[str, str] = {}
    for name, raw in check.obj(doc, "tasks").items():
        table = _task(check, root, name, raw)
        if table.op in seen_ops:
            raise PackError(
                f"{where}: tasks {seen_ops[table.op]} and {name} both replace {table.op}"
            )
        seen_ops[table.op] = name
        tasks[name] = table
    return Pack(
        path=root,
        created=str(doc.get("created", "")),
        evokernel=str(doc.get("evokernel", "")),
        device=device,
        software=software,
        model=model,
        tasks=tasks,
        hashes=_hashes(where, doc.get("hashes")),
        signature=_signature(where, doc.get("signature")),
        quantized=_quantized(where, doc["quantized"]) if "quantized" in doc else None,
    )


def _quantized(where: str, value: Any) -> QuantLaunch:
    """The `quantized` section: every choice well formed and inside the closed sets."""
    from evokernel.ops.tuning import DEFAULT, check_tuning

    at = f"{where}: quantized"
    if not isinstance(value, dict) or not isinstance(value.get("kept"), bool):
        raise PackError(f"{at} must be an object with a boolean 'kept'")
    raw = value.get("choices")
    if not isinstance(raw, list):
        raise PackError(f"{at}.choices must be a list")
    choices = []
    for i, item in enumerate(raw):
        names = [item.get(k) for k in ("role", "format", "op", "mode")] if isinstance(
            item, dict) else []  # fmt: skip
        ints = [item.get(k) for k in ("k", "warps", "tile_bytes")] if names else []
        if not names or not all(isinstance(v, str) for v in names) or not all(
            _count(v) == v for v in ints
        ):  # fmt: skip
            raise PackError(f"{at}.choices[{i}] is malformed: {item!r}"[:300])
        role, fmt, op, mode = (str(v) for v in names)
        k, warps, tile = (_count(v) for v in ints)
        table = item.get("table")
        own = None
        if isinstance(table, list) and len(table) == 3 and isinstance(table[0], str):
            own = (table[0], _count(table[1]), _count(table[2]))
        choice = QuantChoice(role, fmt, op, k, mode, warps, tile, us=_number(item.get("us")),
                             table_us=_number(item.get("table_us")), table=own,
                             source=str(item.get("source") or ""))  # fmt: skip
        try:
            check_tuning(DEFAULT._replace(quant=(choice.entry(), choice.as_table().entry())))
        except AssertionError:
            raise PackError(f"{at}.choices[{i}] is not a launch this evokernel has: "
                            f"{choice.entry()}") from None  # fmt: skip
        choices.append(choice)
    dispatch: list[tuple[int, tuple[int, ...]]] = []
    for i, row in enumerate(value.get("dispatch") or []):
        bound = _count(row.get("max_len")) if isinstance(row, dict) else 0
        idx = row.get("choices") if isinstance(row, dict) else None
        ordered = bound > 0 and not (dispatch and bound <= dispatch[-1][0])
        listed = isinstance(idx, list) and all(
            _count(j) == j and 0 <= j < len(choices) for j in idx
        )
        if not ordered or not listed:
            raise PackError(f"{at}.dispatch[{i}] is malformed or out of order: {row!r}"[:300])
        dispatch.append((bound, tuple(int(j) for j in idx or ())))
    rule = value.get("rule", "")
    return QuantLaunch(tuple(choices), value["kept"], rule if isinstance(rule, str) else "",
                       tuple(dispatch), _end_to_end(value.get("end_to_end")))  # fmt: skip


def _hashes(where: str, value: Any) -> dict[str, str]:
    """`hashes` (absent in packs written before content hashes: then empty, and every program
    is refused when imported)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PackError(f"{where}: hashes must be an object")
    for name, digest in value.items():
        if not is_content_hash(digest):
            raise PackError(f"{where}: hashes[{name!r}] is not 'sha256:' and 64 hex digits"[:300])
    return dict(value)


def _signature(where: str, value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise PackError(f"{where}: signature must be an object of strings or null")
    return dict(value)


def _task(check: _Checker, root: Path, name: str, raw: Any) -> TaskTable:
    where = f"tasks.{name}"
    if not isinstance(raw, dict):
        raise PackError(f"{check.where}: {where} is not an object")
    op = raw.get("op")
    if op is None or op != task_op(name):
        raise PackError(
            f"{check.where}: {where}: unknown task or op {op!r} (packs carry decode_layer tasks)"
        )
    rows = raw.get("dispatch")
    if not isinstance(rows, list) or not rows:
        raise PackError(f"{check.where}: {where}.dispatch must be a non-empty list")
    entries = []
    last = 0
    for i, row in enumerate(rows):
        at = f"{where}.dispatch[{i}]"
        if not isinstance(row, dict):
            raise PackError(f"{check.where}: {at} is not an object")
        bound = row.get("max_len")
        if not isinstance(bound, int) or isinstance(bound, bool) or bound <= last:
            raise PackError(
                f"{check.where}: {at}.max_len must be an integer above {last} (bounds ascend), "
                f"got {bound!r}"
            )
        last = bound
        program = check.string(row, "program", at)
        if program != "baseline":
            _program_file(check.where, root, program, at)
        entries.append(
            PackEntry(
                max_len=bound,
                scenario=str(row.get("scenario", "")),
                context=_count(row.get("context")),
                program=program,
                program_id=row.get("program_id"),
                speedup=_number(row.get("speedup")),
                speedup_ci=_interval(row.get("speedup_ci")),
                end_to_end=_end_to_end(row.get("end_to_end")),
            )
        )
    measured = raw.get("measured")
    return TaskTable(
        task=name,
        op=op,
        entries=tuple(entries),
        run=str(raw.get("run", "")),
        rule=str(raw.get("rule", "")),
        measured=dict(measured) if isinstance(measured, dict) else None,
    )


def _program_file(where: str, root: Path, program: str, at: str) -> None:
    file = (root / program).resolve()
    if not file.is_relative_to(root.resolve()):
        raise PackError(f"{where}: {at}.program {program!r} lies outside the pack")
    try:
        mode = file.stat().st_mode
    except OSError:
        raise PackError(f"{where}: program file {program} is missing") from None
    if not stat.S_ISREG(mode):
        raise PackError(f"{where}: program file {program} is {kind(mode)}, not a regular file")


class _Checker:
    def __init__(self, where: str) -> None:
        self.where = where

    def obj(self, doc: dict[str, Any], key: str) -> dict[str, Any]:
        value = doc.get(key)
        if not isinstance(value, dict):
            raise PackError(f"{self.where}: {key} must be an object, got {value!r}"[:300])
        return value

    def string(self, doc: dict[str, Any], key: str, at: str) -> str:
        value = doc.get(key)
        if not isinstance(value, str) or not value:
            raise PackError(f"{self.where}: {at}.{key} must be a non-empty string")
        return value


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _interval(value: Any) -> tuple[float, float] | None:
    if isinstance(value, list) and len(value) == 2:
        lo, hi = _number(value[0]), _number(value[1])
        if lo is not None and hi is not None:
            return (lo, hi)
    return None


def _end_to_end(value: Any) -> tuple[dict[str, Any], ...]:
    """The recorded end-to-end checks (informational: kept where well formed, else none)."""
    if not isinstance(value, list):
        return ()
    out = []
    for item in value:
        if isinstance(item, dict) and isinstance(item.get("position"), int):
            program = item.get("program")
            out.append(
                {
                    "position": item["position"],
                    "speedup": _number(item.get("speedup")),
                    "ci": list(_interval(item.get("ci")) or ()) or None,
                    "control_ci": list(_interval(item.get("control_ci")) or ()) or None,
                    "program": program if isinstance(program, str) else None,
                }
            )
    return tuple(out)


def _device_text(device: dict[str, Any]) -> str:
    name = str(device.get("name"))
    return "the CPU" if name == "cpu" else name


def _reason(err: Exception) -> str:
    return str(getattr(err, "strerror", None) or err)
