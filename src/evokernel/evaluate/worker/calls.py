"""Worker side: calling candidate code safely, and the correctness phase.

`Caller.call(fn, inputs)` runs one call of candidate (or baseline) code with the guards active,
synchronizes the device inside the same `try` (an asynchronous CUDA error belongs to the call
that caused it), and turns whatever happened into either a result or a reason line:

  * torch.OutOfMemoryError, a refused host allocation, or more device memory than the budget
    -> `memory-budget`;
  * a CUDA error (illegal address, launch failure...) -> `cuda-error`, fatal: the CUDA context
    is poisoned for good, so the worker reports and exits, never to be reused;
  * any other exception -> `exception` with the type, message and the candidate's line.

`check_job()` is one correctness job: fresh CPU inputs from the task (the parent builds the same
bits from the same seed), moved to the device; memory poisoning on (torch.empty returns NaN);
two calls on the same inputs, then optionally one on perturbed inputs; after each call the
inputs are compared bit for bit with a copy taken before it. The raw outputs go to the parent,
which judges them; the worker only reports what it alone can see (exact type, device,
mutation, memory, tampering).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from evokernel.evaluate.process.channel import FatalError
from evokernel.evaluate.protocol import CallRecord
from evokernel.evaluate.worker.guards import Guards
from evokernel.reasons import reason
from evokernel.tasks.base import Task

CUDA_ERROR_MARKERS = (
    "CUDA error",
    "illegal memory access",
    "illegal instruction",
    "misaligned address",
    "unspecified launch failure",
    "device-side assert",
    "CUDA driver error",
    "cudaError",
    "CUresult",
)
_HOST_OOM_MARKERS = ("can't allocate memory", "DefaultCPUAllocator", "std::bad_alloc")


def _is_tensor(value: Any) -> bool:
    return type(value) is torch.Tensor


def tensors_of(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in inputs.items() if _is_tensor(v)}


def clone_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.clone() if _is_tensor(v) else v) for k, v in inputs.items()}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def mutated(before: dict[str, torch.Tensor], inputs: dict[str, Any]) -> list[str]:
    """Names of input tensors whose bits, shape or identity changed."""
    names = []
    for name, saved in before.items():
        now = inputs.get(name)
        if (
            not isinstance(now, torch.Tensor)
            or now.shape != saved.shape
            or now.dtype != saved.dtype
            or not torch.equal(_bits(now), _bits(saved))
        ):
            names.append(name)
    return names


def _candidate_line(err: BaseException, path: str | None) -> str:
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if path and f.filename == path]
    if not (mine or frames):
        return ""
    frame = (mine or frames)[-1]
    return f" at line {frame.lineno}: {(frame.line or '').strip()[:100]}"


def classify(err: BaseException, path: str | None) -> str:
    """The reason line for an exception raised by candidate code (FatalError for CUDA)."""
    text = f"{type(err).__name__}: {err}"
    if isinstance(err, torch.OutOfMemoryError) or any(m in text for m in _HOST_OOM_MARKERS):
        return reason("memory-budget", f"{text[:300]}")
    if any(m in text for m in CUDA_ERROR_MARKERS) or type(err).__name__ == "AcceleratorError":
        raise FatalError(reason("cuda-error", f"{text[:300]}; the worker was discarded"))
    return reason("exception", f"{text[:300]}{_candidate_line(err, path)}")


class Caller:
    """Calls candidate code under the guards, with device sync and memory accounting."""

    def __init__(self, guards: Guards, device: str, device_budget: int, path: str | None):
        self.kept = 0  # device bytes the candidate's calls left allocated, summed
        self.guards = guards
        self.device = device
        self.cuda = device == "cuda"
        self.device_budget = device_budget
        self.path = path
        if self.cuda:
            self._sync = torch.cuda.synchronize
            self._allocated = torch.cuda.memory_allocated
            self._peak = torch.cuda.max_memory_allocated
            self._reset_peak = torch.cuda.reset_peak_memory_stats

    def limit_device_memory(self) -> None:
        """Cap the caching allocator at what is held now plus the candidate's budget."""
        if self.cuda:
            total = torch.cuda.get_device_properties(0).total_memory
            want = torch.cuda.memory_reserved() + self.device_budget
            torch.cuda.set_per_process_memory_fraction(min(0.95, want / total))

    def call(self, fn: Callable[..., Any], inputs: dict[str, Any]) -> tuple[Any, str | None]:
        """(result, None) or (None, reason line). Raises FatalError on a CUDA error."""
        if self.cuda:
            self._sync()
            base = self._allocated()
            self._reset_peak()
        try:
            with self.guards.active():
                out = fn(**inputs)
                if self.cuda:
                    self._sync()
        except FatalError:
            raise
        except BaseException as err:  # the candidate may raise anything, SystemExit included
            if isinstance(err, KeyboardInterrupt):
                raise
            return None, classify(err, self.path)
        if self.cuda:
            used = self._peak() - base
            returned = out.untyped_storage().nbytes() if _is_tensor(out) else 0
            self.kept += max(0, self._allocated() - base - returned)
            budget = f"budget {self.device_budget / 2**20:.0f} MiB"
            if used > self.device_budget:
                line = f"one call allocated {used / 2**20:.0f} MiB of device memory, {budget}"
                return None, reason("memory-budget", line)
            if self.kept > self.device_budget:
                line = f"calls kept {self.kept / 2**20:.0f} MiB of device memory, {budget}"
                return None, reason("memory-budget", line)
        return out, None


# The C switches behind torch.use_deterministic_algorithms and
# torch.utils.deterministic.fill_uninitialized_memory: the Python wrapper of the former also
# imports torch._inductor (seconds per worker), which the poisoning does not need.
_set_det = torch._C._set_deterministic_algorithms
_get_det = torch._C._get_deterministic_algorithms
_get_warn = torch._C._get_deterministic_algorithms_warn_only
_set_fill = torch._C._set_deterministic_fill_uninitialized_memory
_get_fill = torch._C._get_deterministic_fill_uninitialized_memory


@contextmanager
def poisoned() -> Iterator[None]:
    """Fresh memory (torch.empty & co.) filled with NaN / the integer maximum."""
    det, warn, fill = _get_det(), _get_warn(), _get_fill()
    _set_det(True, warn_only=True)
    _set_fill(True)
    try:
        yield
    finally:
        _set_det(det, warn_only=warn)
        _set_fill(fill)


def poison_intact() -> bool:
    return bool(_get_det() and _get_fill())


def observed(
    task: Task, inputs: dict[str, Any], out: Any, before: dict[str, torch.Tensor] | None
) -> tuple[Any, str | None]:
    """(the task's observation of one call, None) or (None, reason line)."""
    got = task.observe(inputs, out, before)
    if isinstance(got, str):
        return None, got
    return got, None


def restore(inputs: dict[str, Any], before: dict[str, torch.Tensor], names: set[str]) -> None:
    """Written inputs back to their contents before the call (same storage)."""
    for name in names:
        now, saved = inputs.get(name), before.get(name)
        if not _is_tensor(now) or saved is None:
            continue
        assert isinstance(now, torch.Tensor)
        if now.shape == saved.shape and now.dtype == saved.dtype:
            now.copy_(saved)


def check_job(
    caller: Caller,
    fn: Callable[..., Any],
    inputs: dict[str, Any],
    perturb: Callable[[dict[str, Any]], None] | None,
    repeat: bool = True,
    task: Task | None = None,
) -> list[CallRecord]:
    """Two calls on `inputs` (one when not `repeat`), then one after `perturb` (when given).
    One record per call: the output (exact type, device, a copy of the tensor) or the reason
    it has none, plus the names of the inputs it mutated.

    With a `task` that writes inputs in place (`task.writes`), their change is not counted as
    mutation: the recorded output is `task.observe(inputs, out, before)` (or its reason line),
    and the written inputs are restored from `before` after each call, so every call sees the
    same inputs."""
    writes = set(task.writes) if task is not None else set()
    records: list[CallRecord] = []
    plan = ["same", "same"] if repeat else ["same"]
    plan += ["perturbed"] if perturb is not None else []
    for step in plan:
        if step == "perturbed" and perturb is not None:
            perturb(inputs)
            if caller.cuda:
                torch.cuda.synchronize()
        before = {k: v.clone() for k, v in tensors_of(inputs).items()}
        with poisoned():
            out, line = caller.call(fn, inputs)
            intact = poison_intact()
        if not intact:
            line = reason("patched", "memory poisoning was switched off by the call")
        changed = [name for name in mutated(before, inputs) if name not in writes]
        if line is None and task is not None and writes:
            out, line = observed(task, inputs, out, {k: before[k] for k in writes if k in before})
        restore(inputs, before, writes)
        if line is not None:
            records.append(CallRecord(step=step, mutated=changed, reason=line))
            break
        if _is_tensor(out):
            kind, device, kept = "torch.Tensor", out.device.type, out.detach().clone()
        else:
            kind, device, kept = f"{type(out).__module__}.{type(out).__qualname__}", None, None
        record = CallRecord(step, changed, None, kind, device, kept)
        records.append(record)
    return records
