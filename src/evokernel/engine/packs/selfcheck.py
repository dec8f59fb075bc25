"""The load-time self-check: before the engine's first real step, every pack program runs its
layer once on random inputs beside the engine's own layer, and must agree.

    result = self_check(pack, cfg, device, dtype, engine_layer, programs, max_len)
    pack = result.apply(pack)            # failed buckets fall back to the engine's layer

Per dispatch bucket that runs a program (and that an engine of context `max_len` can reach):
one decode step of two sequences, one at the bucket's lowest context and one at its highest
(the bound the engine passes as `max_len`, capped at the engine's own), drawn by the task's
input generator (tasks/decode_layer/inputs.py: layer weights, residual stream, RoPE tables, a
KV cache with junk beyond each sequence) at the checkpoint's layer shape, in the engine's
dtype, on the engine's device. The program and the engine's own layer each run on their own
copy; each output (the new residual stream and the K/V rows written) is judged against the
task's reference with the task's tolerance, the rule the search judged the program by.

Outcomes, per bucket:
  * agrees: the program serves the bucket;
  * disagrees (beyond the tolerance, or not finite): the bucket falls back to the engine's
    layer, with one warning line (`strict`: a SelfCheckFailed line instead, and no run);
  * broken: the call raised (SystemExit and KeyboardInterrupt included), returned something
    that is not the layer's output (type, shape, dtype, device), or wrote the KV cache
    outside its token's rows: a PackError line naming the pack and program, whatever `strict`.

Cost: one call of the program and one of the engine's layer per checked bucket, plus the
task's float32 reference; on a GPU the program's first call also compiles its Triton kernels,
which the engine's warm-up would compile anyway (docs/packs.md has measured figures).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from evokernel.engine.packs.format import BASELINE, Pack, PackEntry, PackError, TaskTable
from evokernel.engine.packs.programs import guarded
from evokernel.model.config import ModelConfig

SEED = 0  # the inputs are the same on every load: a failure reproduces


class SelfCheckFailed(PackError):
    """A program disagreed with the reference while the self-check was strict."""


@dataclass(frozen=True)
class BucketCheck:
    task: str
    index: int  # the entry's position in the task's dispatch table
    program: str
    lens: tuple[int, ...]  # the sequences' contexts; max_len = the largest
    program_error: tuple[float, float]  # (rel L2, max abs rel) against the reference
    engine_error: tuple[float, float]
    detail: str = ""  # why the program disagrees; empty when it agrees

    @property
    def agrees(self) -> bool:
        return not self.detail


@dataclass(frozen=True)
class SelfCheck:
    checks: tuple[BucketCheck, ...]
    seconds: float

    def failed(self) -> list[BucketCheck]:
        return [c for c in self.checks if not c.agrees]

    def apply(self, pack: Pack) -> Pack:
        """`pack` with every bucket whose program disagreed put back to the baseline."""
        failed = {(c.task, c.index) for c in self.failed()}
        if not failed:
            return pack
        tasks = {}
        for name, table in pack.tasks.items():
            entries = tuple(
                PackEntry(e.max_len, e.scenario, e.context, BASELINE, end_to_end=e.end_to_end)
                if (name, i) in failed
                else e
                for i, e in enumerate(table.entries)
            )
            tasks[name] = dataclasses.replace(table, entries=entries)
        return dataclasses.replace(pack, tasks=tasks)

    def summary(self, pack: Pack) -> str:
        programs = len({c.program for c in self.checks})
        kept = len(self.checks) - len(self.failed())
        return (
            f"kernel pack {pack.path}: self-check of {programs} program(s) in "
            f"{len(self.checks)} bucket(s) against the engine's layer: {kept} agree "
            f"({self.seconds:.2f} s)"
        )


def self_check(
    pack: Pack,
    cfg: ModelConfig,
    device: str,
    dtype: torch.dtype,
    engine_layer: Callable[..., Any],
    programs: Mapping[str, Callable[..., Any]],
    max_len: int | None = None,
    strict: bool = False,
) -> SelfCheck:
    """Check every (task, bucket) of `pack` that runs one of `programs` (pack-relative name
    -> the imported entry point) and that a context of `max_len` (None: any) can reach."""
    started = time.perf_counter()
    checks = []
    for table in pack.tasks.values():
        for i, entry in enumerate(table.entries):
            if entry.is_baseline:
                continue
            low = table.entries[i - 1].max_len + 1 if i else 1
            high = entry.max_len if max_len is None else min(entry.max_len, max_len)
            if high < low:
                continue  # the engine never reaches this bucket
            checks.append(
                _check(pack, table, i, cfg, device, dtype, engine_layer, programs, (low, high))
            )
    result = SelfCheck(tuple(checks), time.perf_counter() - started)
    if strict and result.failed():
        first = result.failed()[0]
        raise SelfCheckFailed(f"{_line(pack, first)} (strict: not run)")
    return result


def warnings(pack: Pack, result: SelfCheck) -> list[str]:
    """One line per bucket that fell back to the engine's layer."""
    return [f"{_line(pack, c)}; that bucket runs the engine's layer" for c in result.failed()]


def _line(pack: Pack, c: BucketCheck) -> str:
    return (
        f"kernel pack {pack.path}: program {c.program} disagrees with the reference at "
        f"contexts {', '.join(map(str, c.lens))} ({c.detail}; the engine's own layer: rel L2 "
        f"{c.engine_error[0]:.1e})"
    )


def run_layers(
    cfg: ModelConfig,
    dtype: torch.dtype,
    device: str,
    lens: tuple[int, ...],
    layers: Mapping[str, Callable[..., Any]],
) -> tuple[Any, dict[str, Any], dict[str, tuple[Any, dict[str, Any]]]]:
    """The one place that builds a decode layer's inputs and calls layers on them: the task
    (at `cfg`'s layer shape), its inputs for one step of sequences of contexts `lens` (cache
    and `max_len` = max(lens)), and per layer name its output and the inputs copy it ran on."""
    from evokernel.tasks import get_task
    from evokernel.tasks.decode_layer.scenarios import make_scenario
    from evokernel.tasks.decode_layer.task import name_for, shape_of

    task = get_task(name_for(cfg))
    scenario = make_scenario("self_check", shape_of(cfg), max(lens), lens, device)
    inputs = task.make_inputs(scenario, SEED, dtype, device)
    outputs = {}
    for name, layer in layers.items():
        copy = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        outputs[name] = (layer(**copy), copy)
    return task, inputs, outputs


def _check(
    pack: Pack,
    table: TaskTable,
    index: int,
    cfg: ModelConfig,
    device: str,
    dtype: torch.dtype,
    engine_layer: Callable[..., Any],
    programs: Mapping[str, Callable[..., Any]],
    bucket: tuple[int, int],
) -> BucketCheck:
    from evokernel.evaluate.compare import errors

    program = table.entries[index].program
    fn = programs[program]
    lens = tuple(sorted(set(bucket)))
    lens_text = ", ".join(map(str, lens))

    def call_program(**inputs: Any) -> Any:
        with guarded(pack, program, f"at its first call (self-check, contexts {lens_text})"):
            return fn(**inputs)

    layers = {"program": call_program, "engine": engine_layer}
    task, inputs, outputs = run_layers(cfg, dtype, device, lens, layers)
    before = {name: inputs[name] for name in ("k_cache", "v_cache")}  # cache writes judged
    ref = task.reference(inputs)
    tol = task.tolerance(dtype)
    judged: dict[str, tuple[tuple[float, float], str]] = {}
    for name, (out, used) in outputs.items():
        got = task.observe(used, out, before)
        if isinstance(got, str):
            if name == "program":
                raise PackError(
                    f"kernel pack {pack.path}: program {program} returned a wrong output at its "
                    f"first call (self-check, contexts {lens_text}): {got}"
                )
            raise RuntimeError(f"the engine's own decode layer failed the self-check: {got}")
        if not bool(torch.isfinite(got).all()):
            judged[name] = ((float("inf"), float("inf")), "its output holds NaN or Inf")
            continue
        rel_l2, max_abs_rel = errors(got, ref)
        detail = ""
        if rel_l2 > tol.rel_l2 or max_abs_rel > tol.max_abs_rel:
            detail = (
                f"rel L2 {rel_l2:.1e}, max abs rel {max_abs_rel:.1e}; the tolerance is "
                f"{tol.rel_l2:g}, {tol.max_abs_rel:g}"
            )
        judged[name] = ((rel_l2, max_abs_rel), detail)
    (prog_err, prog_detail), (eng_err, _) = judged["program"], judged["engine"]
    return BucketCheck(table.task, index, program, lens, prog_err, eng_err, prog_detail)


__all__ = ["BucketCheck", "SelfCheck", "SelfCheckFailed", "run_layers", "self_check", "warnings"]
