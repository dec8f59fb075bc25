"""Write a kernel pack from finished search runs (their dispatch.json and programs).

    pack = write_pack([RUN_DIR, ...], cfg, PACK_DIR, device)

The dispatch rule (docs/layer-task.md), per task and per engine context bucket `max_len` in
`context_buckets(cfg.max_position_embeddings)` (engine/graph.py: the bounds CUDA graphs are
captured for): take the smallest public scenario whose context (the longest of its `seq_lens`)
is >= the bound, else the largest scenario; the bucket gets the program the run's dispatch
table chose for that scenario (evolve/dispatch.py: the correct program whose speedup interval
against the fastest baseline lies wholly above 1), or "baseline" (the engine's own layer) where
it kept the baseline. A win is never carried into contexts where the run measured otherwise:
when a public scenario whose context lies inside the bucket (above the previous bound, up to
this one) was given another program or the baseline, the bucket keeps the baseline. (A
ctx-512 winner put into the 1..256 bucket, where the ctx-128 scenario had kept the baseline,
made Qwen3-0.6B's decode 1.3% slower at position 1 on an H100, timed interleaved.) On the CPU
interpreter nothing is timed, so every bucket is baseline.

Scenario parameters come from the task (`get_task(name).scenarios(device)`), or from the
caller (`scenarios`: task name -> scenarios). The chosen programs are copied to
PACK_DIR/programs/<task>-<program id>.py (from the run's programs/ directory, else from its
database); pack.json is written last, atomically, with the content hash of every program and
their signature with this user's pack key (engine/packs/trust.py), and program files it no longer
names are removed. Each table records the layer shape its search measured (`measured`; on the
CPU a stand-in smaller than the model's layer, marked `stand_in`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from evokernel import __version__
from evokernel.engine.packs.format import (
    BASELINE,
    PACK_FILE,
    PROGRAMS_DIR,
    Pack,
    PackEntry,
    PackError,
    QuantLaunch,
    TaskTable,
    describe_device,
    describe_shape,
    safe_name,
    shape_key,
    software_versions,
    task_op,
)
from evokernel.engine.packs.trust import content_hash, sign
from evokernel.errors import EvokernelError
from evokernel.files import FileRefused, output_file, read_regular
from evokernel.model.config import ModelConfig
from evokernel.tasks.base import Scenario

RULE = (
    "per context bucket: the winner of the smallest public scenario whose context >= the "
    "bound (else the largest scenario), where its speedup interval lies wholly above 1 and "
    "every public scenario inside the bucket chose the same program; else the baseline (the "
    "engine's own layer)"
)


def scenario_context(s: Scenario) -> int:
    """The longest context a scenario runs: max(seq_lens) (else its cache length S_max)."""
    lens = s.params.get("seq_lens")
    if lens:
        return int(max(lens))
    if "S_max" in s.params:
        return int(s.params["S_max"])
    raise PackError(f"scenario {s.name} has neither seq_lens nor S_max: no context to dispatch by")


def choose_scenarios(bounds: Sequence[int], scenarios: Iterable[Scenario]) -> list[Scenario]:
    """Per bound, the smallest public scenario whose context is >= it, else the largest one
    (ties: fewer sequences, then the name)."""
    public = sorted(
        (s for s in scenarios if not s.hidden),
        key=lambda s: (scenario_context(s), int(s.params.get("B", 1)), s.name),
    )
    if not public:
        raise PackError("the task has no public scenarios to dispatch by")
    chosen = []
    for bound in bounds:
        chosen.append(next((s for s in public if scenario_context(s) >= bound), public[-1]))
    return chosen


def scenarios_inside(scenarios: Iterable[Scenario], low: int, high: int) -> list[Scenario]:
    """The public scenarios whose context lies in (low, high]: those a bucket serves."""
    return [s for s in scenarios if not s.hidden and low < scenario_context(s) <= high]


def _program(row: Mapping[str, Any] | None) -> str:
    return BASELINE if row is None else str(row.get("program", BASELINE))


def write_pack(
    run_dirs: Path | str | Sequence[Path | str],
    cfg: ModelConfig,
    out_dir: Path | str,
    device: str,
    scenarios: Mapping[str, Sequence[Scenario]] | None = None,
    quantized: QuantLaunch | None = None,
) -> Pack:
    """Write PACK_DIR = `out_dir` from the finished runs `run_dirs` (one per task, each with
    dispatch.json) for the checkpoint `cfg` on this machine's `device`, with a quantized
    checkpoint's launch choices (tune/quant.py) when given; return the pack."""
    from evokernel.engine.graph import context_buckets

    runs = [Path(run_dirs)] if isinstance(run_dirs, (str, Path)) else [Path(r) for r in run_dirs]
    out = Path(out_dir)
    bounds = context_buckets(cfg.max_position_embeddings)
    tables: dict[str, TaskTable] = {}
    files: dict[str, str] = {}  # pack-relative program path -> source
    for run in runs:
        doc = _dispatch_doc(run)
        task = str(doc.get("task", ""))
        op = task_op(task)
        if op is None:
            raise PackError(f"run {run} searched {task!r}, which no engine op runs")
        if task in tables:
            raise PackError(f"two runs of {task} given")
        if doc.get("device") not in (None, device):
            raise PackError(f"run {run} ran on {doc.get('device')}, the pack is for {device}")
        listed = scenarios[task] if scenarios is not None and task in scenarios else None
        public = list(listed) if listed is not None else _task_scenarios(task, device)
        rows = {str(e.get("scenario")): e for e in doc.get("scenarios", [])}
        entries = []
        for i, (bound, s) in enumerate(zip(bounds, choose_scenarios(bounds, public))):
            row = rows.get(s.name)
            inside = scenarios_inside(public, bounds[i - 1] if i else 0, bound)
            if any(_program(rows.get(c.name)) != _program(row) for c in inside):
                row = None  # measured otherwise inside the bucket: keep the baseline
            entry, source = _entry(run, task, bound, s, row)
            if source is not None:
                files[entry.program] = source
            entries.append(entry)
        tables[task] = TaskTable(
            task,
            op,
            tuple(entries),
            run=_relative(run, out),
            rule=RULE,
            measured=measured_shape(public, cfg),
        )
    pack = Pack(
        path=out,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        evokernel=__version__,
        device=describe_device(device),
        software=software_versions(),
        model=shape_key(cfg, _timed_dtype(device)),
        tasks=tables,
        quantized=quantized,
    )
    return save_pack(pack, files)


def measured_shape(scenarios: Sequence[Scenario], cfg: ModelConfig) -> dict[str, Any] | None:
    """The layer shape the public scenarios ran (pack.json's key names), with `stand_in`
    true when it is not the checkpoint's own; None when the scenarios hold no shape."""
    public = [s for s in scenarios if not s.hidden]
    if not public or not all(k in public[0].params for k in _SCENARIO_KEYS.values()):
        return None
    shape = {key: int(public[0].params[name]) for key, name in _SCENARIO_KEYS.items()}
    return {**shape, "stand_in": any(shape[k] != getattr(cfg, k) for k in shape)}


_SCENARIO_KEYS = {
    "hidden_size": "H",
    "num_attention_heads": "Hq",
    "num_key_value_heads": "Hkv",
    "head_dim": "D",
    "intermediate_size": "I",
}


def _timed_dtype(device: str) -> torch.dtype:
    from evokernel import device as devices

    return devices.default_dtype(device)


def _dispatch_doc(run: Path) -> dict[str, Any]:
    file = run / "dispatch.json"
    try:
        doc = json.loads(file.read_text())
    except FileNotFoundError:
        raise PackError(f"run {run} has no dispatch.json: finish the run first") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PackError(f"run {run}: cannot read dispatch.json: {err}") from None
    if not isinstance(doc, dict):
        raise PackError(f"run {run}: dispatch.json is not a JSON object")
    return doc


def _task_scenarios(task: str, device: str) -> list[Scenario]:
    from evokernel.tasks import get_task

    return list(get_task(task).scenarios(device))


def _entry(
    run: Path, task: str, bound: int, s: Scenario, row: Mapping[str, Any] | None
) -> tuple[PackEntry, str | None]:
    context = scenario_context(s)
    baseline = PackEntry(bound, s.name, context, BASELINE)
    if row is None:
        return baseline, None
    program = str(row.get("program", BASELINE))
    ci = row.get("speedup_ci")
    # The run's table already keeps only wins; checked again, as the rule is the pack's too.
    if program == BASELINE or not (isinstance(ci, list) and len(ci) == 2 and ci[0] > 1.0):
        return baseline, None
    name = f"{PROGRAMS_DIR}/{safe_name(task)}-{safe_name(program)}.py"
    entry = PackEntry(
        max_len=bound,
        scenario=s.name,
        context=context,
        program=name,
        program_id=program,
        speedup=float(row["speedup"]) if row.get("speedup") is not None else None,
        speedup_ci=(float(ci[0]), float(ci[1])),
    )
    return entry, _program_source(run, program, str(row.get("file") or ""))


def _program_source(run: Path, program: str, file: str) -> str:
    """The program's code: the run's copy (programs/<id>.py), else its database's."""
    if file:
        try:
            return (run / file).read_text()
        except OSError:
            pass
    from evokernel.evolve.database import Database

    try:
        db = Database(run / "programs.sqlite", readonly=True)
    except EvokernelError as err:
        raise PackError(f"run {run}: no source of program {program}: {err}") from None
    try:
        if program not in db:
            raise PackError(f"run {run}: dispatch.json names program {program}, which it lacks")
        return str(db.get(program).code)
    finally:
        db.close()


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path.resolve())


def save_pack(pack: Pack, files: Mapping[str, str]) -> Pack:
    """Write `files` (pack-relative name -> source), then pack.json atomically, with the
    programs' content hashes (of the bytes written) signed by this user's key; remove the
    program files the previous pack.json named and this one does not. Returns the pack as
    written. A pack.json that is not a regular file is refused, never replaced."""
    from evokernel.evolve.rundir import atomic_write

    named = {p.relative_to(pack.path).as_posix() for p in pack.programs()}
    missing = sorted(named - set(files))
    if missing:
        raise PackError(f"kernel pack {pack.path}: no source given for {missing[0]}")
    out = pack.path
    if out.exists() and not out.is_dir():
        raise PackError(f"kernel pack {out} exists and is not a directory")
    try:
        output_file(out / PACK_FILE)
    except FileRefused as err:
        raise PackError(f"kernel pack {out}: {err}") from None
    try:
        (out / PROGRAMS_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PackError(f"cannot create {out / PROGRAMS_DIR}: {err.strerror or err}") from None
    before = _named_programs(out)
    hashes = {}
    for name, source in sorted(files.items()):
        atomic_write(out / name, source)
        hashes[name] = content_hash(read_regular(out / name))
    pack = dataclasses.replace(pack, hashes=hashes, signature=sign(hashes))
    atomic_write(out / PACK_FILE, json.dumps(pack.to_dict(), indent=2) + "\n")
    for name in before - set(files):  # only files the previous pack.json named
        with contextlib.suppress(OSError):
            os.unlink(out / name)
    return pack


def _named_programs(out: Path) -> set[str]:
    """The program files an existing pack.json in `out` names (none when it is unreadable)."""
    try:
        doc = json.loads(read_regular(out / PACK_FILE))
        tables = doc["tasks"].values()
        names = {str(e["program"]) for t in tables for e in t["dispatch"]}
    except (OSError, EvokernelError, ValueError, TypeError, KeyError, AttributeError):
        return set()
    prefix = f"{PROGRAMS_DIR}/"
    return {n for n in names if n.startswith(prefix) and "/" not in n[len(prefix) :]}


def format_pack(pack: Pack) -> str:
    """The pack's tables as plain text: per task, bucket -> program or baseline, speedup."""
    where = "the CPU" if pack.device.get("name") == "cpu" else str(pack.device.get("name"))
    lines = [
        f"kernel pack {pack.path}: {where}, {pack.model.get('dtype')}, {describe_shape(pack.model)}"
    ]
    for task, table in pack.tasks.items():
        lines.append(f"{task} (op {table.op}):")
        if table.measured and table.measured.get("stand_in"):
            lines.append(
                f"  searched at a stand-in layer ({describe_shape(table.measured)}), smaller "
                "than this checkpoint's"
            )
        rows = [("max_len", "scenario", "chosen", "speedup [95% CI]")]
        for e in table.entries:
            speed = "-"
            if e.speedup is not None and e.speedup_ci is not None:
                speed = f"{e.speedup:.3f}x [{e.speedup_ci[0]:.3f}, {e.speedup_ci[1]:.3f}]"
            rows.append((str(e.max_len), e.scenario, e.program, speed))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for j, r in enumerate(rows):
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
            if j == 0:
                lines.append("  " + "  ".join("-" * w for w in widths))
    if pack.quantized is not None:
        lines += _quantized_lines(pack.quantized)
    if pack.device.get("kind") == "cpu":
        lines.append("(CPU interpreter: nothing is timed; every bucket keeps the baseline)")
    return "\n".join(lines)


def _quantized_lines(q: QuantLaunch) -> list[str]:
    """The launch choices: every setting measured (the table's first per role), then which
    run in each bucket and what the whole step measured there."""
    state = "run by the engine where listed" if q.runs else "not run (the table's choices stay)"
    lines = [f"packed projections' launches ({state}):"]
    rows = [("#", "role", "format", "op", "K", "mode", "warps", "tile", "from", "us (table's)")]
    for i, c in enumerate(q.choices):
        us = "-"
        if c.us is not None and c.table_us is not None:
            us = f"{c.us:.2f} ({c.table_us:.2f})"
        rows.append((str(i), c.role, c.format, c.op, str(c.k), c.mode, str(c.warps or "auto"),
                     str(c.tile_bytes or "auto"), c.source or "-", us))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for j, r in enumerate(rows):
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if j == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    checks = {e["position"]: e for e in q.end_to_end}
    low = 1
    for bound, idx in q.dispatch:
        run = ", ".join(f"#{i}" for i in idx) if q.runs and idx else "the table's"
        line = f"  bucket <= {bound}: {run}"
        e = checks.get(low)
        ci, control = (e or {}).get("ci"), (e or {}).get("control_ci")
        if e and e.get("speedup") is not None and ci and control:
            line += (f"; step at position {low}: {e['speedup']:.4f}x [{ci[0]:.4f}, {ci[1]:.4f}] "
                     f"(control [{control[0]:.4f}, {control[1]:.4f}])")  # fmt: skip
        lines.append(line)
        low = bound + 1
    if q.rule:
        lines.append(f"  ({q.rule})")
    return lines


__all__ = [
    "RULE",
    "choose_scenarios",
    "format_pack",
    "scenario_context",
    "scenarios_inside",
    "write_pack",
]
