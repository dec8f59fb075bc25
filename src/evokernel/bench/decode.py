"""`evokernel bench decode`: batch-1 decode by context position, our engine and the baselines,
in one process on one checkpoint, written as one result file (JSON + CSV, docs/bench.md).

    doc = run_decode_bench(DecodeBenchOptions(...), progress=print_to_stderr)

Order of work: the environment and the copy bandwidth first (while the GPU is empty); then
system by system (each loaded once, measured at every position, then freed, so one model's
memory at a time and each compile is reused across positions); a row per system and position
(`stepping.measure_cell`), a failed one with its `error`. The file is rewritten after every
row, so an interrupted run leaves what it measured. `max_minutes` stops starting new rows
(they get an error saying so), so a run ends with a complete file before an outer time limit.
With a kernel pack (`evokernel` and `evokernel_pack` both run), the two and a control copy of
`evokernel` are then loaded together and timed interleaved at every position
(bench/paired.py, `doc["paired"]`): the pack's speedup with an interval, which two systems
measured one after the other cannot give, and the control's, the floor it must clear.
Quantized checkpoints of the same architecture (`quantized`, bench/quantized.py) run our
engine after the other systems, each a system named after its format; a system that reads
other bytes than the dense checkpoint (those, and `gptfast_int8`) gets its floor from its own
bytes, with both floors in `doc["floors"]`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from evokernel import device as devices
from evokernel.bench import floor
from evokernel.bench.env import collect_env
from evokernel.bench.paired import (
    CONTROL_SUFFIX,
    control_copy,
    measure_pair,
    pair_entry,
    pair_line,
)
from evokernel.bench.quantized import check_quantized, system_bytes, system_name
from evokernel.bench.results import KIND, SCHEMA, Row, error_line, write
from evokernel.bench.stepping import CellPlan, free, measure_cell, prompt_ids
from evokernel.bench.systems import load_system, skip_reason
from evokernel.errors import ConfigError
from evokernel.model.config import ModelConfig
from evokernel.nvml import Nvml


@dataclass(frozen=True)
class Suite:
    positions: tuple[int, ...]
    steps: int
    warmup: int
    power_window_ms: float


SUITES = {
    "quick": Suite((1, 128, 512, 1024, 4096), steps=64, warmup=8, power_window_ms=500),
    # Each engine context bucket (engine/graph.py: bounds 256, 512, ..., doubling; a kernel
    # pack's dispatch follows them) holds at least one row's steps: 1 and 128 (<= 256), 384
    # (257..512), 512 (513..1024), 1024, 3000, 4096, 8192, 16384, 32768 (the steps run past
    # each power of two into the next bucket).
    "full": Suite(
        (1, 128, 384, 512, 1024, 3000, 4096, 8192, 16384, 32768),
        steps=64,
        warmup=8,
        power_window_ms=500,
    ),
    # The CPU: a check of the benchmark's own code on a small model, never a speed figure.
    "smoke": Suite((1, 128, 320), steps=8, warmup=2, power_window_ms=0),
}
CPU_LABEL = "cpu-smoke ({dtype} on the CPU, compile backend eager; no speed claim)"


@dataclass(frozen=True)
class DecodeBenchOptions:
    model_dir: Path
    suite: str  # quick | full | smoke
    systems: tuple[str, ...]
    positions: tuple[int, ...]
    steps: int
    warmup: int
    device: str  # cuda | cpu
    dtype: torch.dtype
    power_window_ms: float
    out: Path
    command: str
    max_minutes: float | None = None
    label: str | None = None
    engine_ops: str | None = None  # our engine's op set (None: triton on CUDA, torch on the CPU)
    engine_kernels: Path | None = None  # a kernel pack our engine runs (the baselines do not)
    quantized: tuple[Path, ...] = ()  # quantized checkpoints our engine also runs
    # kernel packs `tune` wrote for some of them: each also runs with the one it fits
    quantized_kernels: tuple[Path, ...] = ()
    # A suite's positions (not ones the user named): those past the model's context move down
    # to the last position whose steps still fit, and the run says so.
    fit_positions: bool = False

    def __post_init__(self) -> None:
        if not self.positions or min(self.positions) < 1:
            raise ConfigError("--positions: every position must be >= 1 (a prompt of that many)")
        if len(set(self.positions)) != len(self.positions):
            raise ConfigError("--positions: a position is named twice")
        if self.steps < 2:
            raise ConfigError(f"--steps must be >= 2, got {self.steps}")
        if self.warmup < 0:
            raise ConfigError(f"--warmup must be >= 0, got {self.warmup}")


@dataclass
class _Run:
    opts: DecodeBenchOptions
    doc: dict[str, Any]
    progress: Callable[[str], None]
    started: float = field(default_factory=time.monotonic)

    def over_budget(self) -> bool:
        limit = self.opts.max_minutes
        return limit is not None and time.monotonic() - self.started > limit * 60

    def add(self, row: Row) -> None:
        self.doc["results"].append(row.to_dict())
        write(self.doc, self.opts.out)


def _fit_positions(
    opts: DecodeBenchOptions,
    plans: list[CellPlan],
    limit: int,
    progress: Callable[[str], None],
) -> tuple[DecodeBenchOptions, list[CellPlan]]:
    """The suite's positions whose steps fit `limit` positions, the others moved down to the
    last that fits (said once); duplicates dropped."""
    fitted: list[int] = []
    for plan in plans:
        last = plan.position - (plan.need - limit)  # the position whose steps end at the limit
        pos = min(plan.position, last)
        if pos != plan.position:
            progress(
                f"position {plan.position}: its {plan.need - plan.position} steps pass the "
                f"model's {limit} positions; measured at {pos} instead"
            )
        if pos >= 1 and pos not in fitted:
            fitted.append(pos)
    opts = replace(opts, positions=tuple(fitted))
    return opts, [CellPlan(p, opts.steps, opts.warmup, opts.power_window_ms) for p in fitted]


def run_decode_bench(
    opts: DecodeBenchOptions, progress: Callable[[str], None] = lambda line: None
) -> dict[str, Any]:
    """Run the benchmark, write `opts.out` (and its CSV); return the document."""
    cfg = ModelConfig.from_dir(opts.model_dir)
    plans = [CellPlan(p, opts.steps, opts.warmup, opts.power_window_ms) for p in opts.positions]
    if opts.fit_positions:
        opts, plans = _fit_positions(opts, plans, cfg.max_position_embeddings, progress)
    max_need = max(plan.need for plan in plans)
    if max_need > cfg.max_position_embeddings:
        raise ConfigError(
            f"position {max(opts.positions)} + {max_need - max(opts.positions)} decode steps "
            f"exceeds the model's {cfg.max_position_embeddings} positions"
        )
    quantized = _quantized_systems(cfg, opts)
    devices.prepare(opts.device)  # Triton's mode, before any kernel is imported
    itemsize = torch.empty((), dtype=opts.dtype).element_size()
    progress(f"measuring the copy bandwidth on {opts.device} ...")
    env = collect_env(opts.device)
    run = _Run(opts, _new_doc(opts, cfg, itemsize, env), progress)
    model = run.doc["model"]
    meter = Nvml.open(torch.cuda.current_device()) if opts.device == "cuda" else None
    for name in opts.systems:
        reason = skip_reason(name, opts.device)
        if reason is not None:
            run.doc["skipped"][name] = reason
            progress(f"{name}: skipped ({reason})")
            continue
        run.doc["systems"].append(name)
        _run_system(run, name, plans, cfg, env["copy_gbps"], model, meter, max_need)
    for name, (model_dir, kernels) in quantized.items():
        run.doc["systems"].append(name)
        run.doc["options"]["quantized"][name] = str(model_dir)
        if kernels is not None:
            run.doc["options"].setdefault("quantized_kernels", {})[name] = str(kernels)
        _run_system(run, name, plans, cfg, env["copy_gbps"], model, meter, max_need, model_dir,
                    kernels)  # fmt: skip
    if {"evokernel", "evokernel_pack"} <= set(run.doc["systems"]):
        _run_pair(run, ("evokernel", "evokernel_pack"), plans, cfg, max_need)
    write(run.doc, opts.out)
    return run.doc


def _quantized_systems(
    cfg: ModelConfig, opts: DecodeBenchOptions
) -> dict[str, tuple[Path, Path | None]]:
    """System name -> (quantized checkpoint, kernel pack or None): each --quantized
    checkpoint as it is, then with each --quantized-kernels pack (`<name>+pack`), which must
    fit one of them (the first it fits)."""
    from evokernel.engine.packs.format import PackError
    from evokernel.engine.packs.load import load_pack

    out: dict[str, tuple[Path, Path | None]] = {
        system_name(check_quantized(cfg, d)): (d, None) for d in opts.quantized
    }
    for pack in opts.quantized_kernels:
        reasons = []
        for name, (model_dir, _) in list(out.items()):
            try:
                load_pack(pack, ModelConfig.from_dir(model_dir), opts.device)
            except PackError as err:
                reasons.append(str(err))
                continue
            out[f"{name}+pack"] = (model_dir, pack)
            break
        else:
            why = reasons[0] if reasons else "no --quantized checkpoint given"
            raise ConfigError(f"--quantized-kernels {pack}: fits no --quantized checkpoint ({why})")
    return out


def _run_pair(
    run: _Run, names: tuple[str, str], plans: list[CellPlan], cfg: ModelConfig, max_need: int
) -> None:
    """Both systems, and a second copy of the first as a control, loaded at once and timed
    interleaved at every position (bench/paired.py): the pack's speedup over the plain engine
    with an interval, and the control's (what identical code differs by in this run), in
    `doc["paired"]`."""
    opts = run.opts
    loaded: list[Any] = []
    failed: str | None = None
    pairs = [names, (names[0], names[0] + CONTROL_SUFFIX)]
    try:
        try:
            for name in (*names, names[0]):
                args = (opts.device, opts.dtype, max_need, opts.engine_ops, opts.engine_kernels)
                loaded.append(load_system(name, opts.model_dir, *args))
            control_copy(loaded[2])
        except Exception as err:
            failed = f"load failed: {error_line(err)}"
        for plan in plans:
            if failed is None and run.over_budget():
                failed = _budget_error(opts)
            for k, (a, b) in enumerate(pairs):
                if failed is not None:
                    entry = pair_entry(a, b, plan, error=failed)
                else:
                    prompt = prompt_ids(cfg.vocab_size, plan.position)
                    other = loaded[1 + k]
                    entry = measure_pair(loaded[0], other, prompt, plan, opts.device)
                run.doc["paired"].append(entry)
                run.progress(pair_line(entry))
            write(run.doc, opts.out)
    finally:
        for system in loaded:
            with contextlib.suppress(Exception):
                system.close()
        loaded.clear()
        free(opts.device)


def _run_system(
    run: _Run,
    name: str,
    plans: list[CellPlan],
    cfg: ModelConfig,
    copy_gbps: float,
    model: dict[str, Any],
    meter: Nvml | None,
    max_need: int,
    model_dir: Path | None = None,
    kernels: Path | None = None,
) -> None:
    """`model_dir`: a quantized checkpoint our engine runs as system `name`, with the kernel
    pack `kernels` if given (default: the benchmark's checkpoint, system `name` as listed,
    with --kernels)."""
    opts = run.opts
    if run.over_budget():
        for plan in plans:
            run.add(Row(name, plan.position, plan.steps, error=_budget_error(opts)))
        return
    t0 = time.perf_counter()
    try:
        system = load_system(
            name if model_dir is None else "evokernel" if kernels is None else "evokernel_pack",
            opts.model_dir if model_dir is None else model_dir,
            opts.device,
            opts.dtype,
            max_need,
            opts.engine_ops,
            opts.engine_kernels if model_dir is None else kernels,
        )
    except Exception as err:
        line = f"load failed: {error_line(err)}"
        run.progress(f"{name}: {line}")
        for plan in plans:
            run.add(Row(name, plan.position, plan.steps, error=line))
        free(opts.device)
        return
    run.progress(f"{name}: loaded in {time.perf_counter() - t0:.1f} s")
    weight_bytes = model["weight_bytes"]
    if model_dir is not None or name == "gptfast_int8":
        system.name = name
        weight_bytes = system_bytes(system) or weight_bytes
        run.doc["floors"][name] = {"weight_bytes": weight_bytes,
                                   "bf16_weight_bytes": model["weight_bytes"]}  # fmt: skip
    cache_lens = run.doc["options"]["cache_len"].setdefault(name, {})
    for plan in plans:
        if run.over_budget():
            run.add(Row(name, plan.position, plan.steps, error=_budget_error(opts)))
            continue
        prompt = prompt_ids(cfg.vocab_size, plan.position)
        floor_ms = floor.floor_ms(
            weight_bytes, model["kv_bytes_per_token"], plan.position, copy_gbps
        )
        row, cache_len = measure_cell(system, prompt, plan, floor_ms, meter, opts.device)
        cache_lens[str(plan.position)] = cache_len
        line = progress_line(row, cache_len)
        if weight_bytes != model["weight_bytes"] and row.ms_p50:
            dense_ms = floor.floor_ms(
                model["weight_bytes"], model["kv_bytes_per_token"], plan.position, copy_gbps
            )
            pct = 100 * dense_ms / row.ms_p50
            run.doc["floors"][name].setdefault("pct_bf16_floor", {})[str(plan.position)] = pct
            line += f", {pct:.1f}% of the bf16 floor"
        run.progress(line)
        run.add(row)
    try:
        run.doc["options"]["setup"][name] = system.setup()
        system.close()
    finally:
        del system
        free(opts.device)
    write(run.doc, opts.out)


def _budget_error(opts: DecodeBenchOptions) -> str:
    return f"not run: --max-minutes {opts.max_minutes:g} reached"


def progress_line(row: Row, cache_len: int | None) -> str:
    head = f"{row.system:<10} position {row.position:>6}"
    if row.error is not None:
        return f"{head}: error: {row.error} ({row.wall_s or 0:.1f} s)"
    assert row.tok_s is not None and row.pct_floor is not None and row.ttft_ms is not None
    cache = "growing" if cache_len is None else str(cache_len)
    return (
        f"{head}: {row.tok_s:9.1f} tok/s, p50 {row.ms_p50:.4f} ms, {row.pct_floor:5.1f}% of "
        f"floor, TTFT {row.ttft_ms:.2f} ms, cache {cache} ({row.wall_s:.1f} s)"
    )


def _new_doc(
    opts: DecodeBenchOptions, cfg: ModelConfig, itemsize: int, env: dict[str, Any]
) -> dict[str, Any]:
    config_keys = (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings",
    )  # fmt: skip
    return {
        "kind": KIND,
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "suite": opts.suite,
        "label": opts.label,
        "command": opts.command,
        "model": {
            "dir": str(opts.model_dir),
            "name": opts.model_dir.resolve().name,
            "dtype": str(opts.dtype).removeprefix("torch."),
            "config": {k: getattr(cfg, k) for k in config_keys},
            "weight_bytes": floor.weight_bytes(cfg, itemsize),
            "kv_bytes_per_token": floor.kv_bytes_per_token(cfg, itemsize),
        },
        "env": env,
        "options": {
            "steps": opts.steps,
            "warmup": opts.warmup,
            "batch": 1,
            "positions": list(opts.positions),
            "power_window_ms": opts.power_window_ms,
            "timer": "host clock per step" if opts.device == "cpu" else "CUDA events per step",
            "max_minutes": opts.max_minutes,
            "kernels": str(opts.engine_kernels) if opts.engine_kernels is not None else None,
            "cache_len": {},  # system -> {position: KV cache positions, null when it grows}
            "setup": {},  # system -> how it ran (ops, compile settings, graphs compiled)
            "quantized": {},  # quantized system -> its checkpoint directory
        },
        "systems": [],
        "skipped": {},
        "results": [],
        "paired": [],  # bench/paired.py: the pack against the plain engine, interleaved
        # systems that read other bytes than the checkpoint: {weight_bytes (their floor's),
        # bf16_weight_bytes, pct_bf16_floor: {position: % of the dense floor}}
        "floors": {},
    }
