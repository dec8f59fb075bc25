"""The kernel-task contract: what the evaluator needs to know about a problem.

A task is data plus a little code: an interface (the function a candidate file must define),
a pure-PyTorch reference in float64 (on the inputs' device, returned on the CPU), a seeded
input generator with public (timed) and hidden (correctness-only) scenarios, tolerances per
dtype, stock baselines, and a byte/FLOP count for the roofline.

Who calls what, and where:
  * the evaluator's parent process: `scenarios`, `hidden_scenarios`, `make_inputs` (on the
    device the worker uses: the CPU, or the worker's GPU),
    `perturb`, `reference`, `tolerance`, `bytes_moved`, `flops`. The reference never runs in the
    candidate's process.
  * the candidate's worker process: `make_inputs` (on its device), `perturb`, `output_spec`,
    `baselines`. Never `reference`.

In-place outputs: a task whose entry point writes some of its inputs (a decode layer appends
K and V to the cache) names them in `writes`. The worker then does not count their change as
tampering; `observe(inputs, out, before)` turns the call's return value and the written inputs
into the one tensor judged against `reference` (which returns the same layout), and reports a
write outside the allowed region as a reason line. After each correctness call the worker
restores the written inputs from `before`, so repeated calls see the same inputs.

Graph timing: with `graph_layers` = L > 0, on a GPU each implementation is timed as a CUDA
graph of L consecutive calls on L distinct input copies (distinct weights, cold L2, as the
engine's layers run), replayed; a call's time is the replay's over L. Code that cannot be
captured (a host sync, a fresh allocation pattern per call) fails the timed phase.

Determinism: `make_inputs(scenario, seed, dtype, device)` and `perturb(inputs, seed)` are pure
functions of their arguments (a `torch.Generator` on the inputs' device, tasks/rng.py), so the
parent and the worker build bit-identical inputs from the same seed: on the CPU anywhere, on a
GPU when both build them on the same GPU (the evaluator's parent uses its worker's GPU). The
reference runs on the inputs' device in float64 and returns a CPU tensor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

Inputs = dict[str, Any]
"""Keyword arguments of the task's entry point (tensors and Python scalars)."""


# Dtypes a candidate is checked in, per device kind, the timed one first: bf16 on the GPU
# (what the engine runs), float32 on the CPU (the interpreter computes bf16 as NaN).
DEVICE_DTYPES: Mapping[str, tuple[torch.dtype, ...]] = {
    "cuda": (torch.bfloat16, torch.float16),
    "cpu": (torch.float32, torch.float16),
}


@dataclass(frozen=True)
class Scenario:
    """One shape configuration of a task.

    name:   stable identifier used in results, dispatch tables and prompts ("b1_ctx4096").
    params: task-specific shape parameters (ints, or tuples of ints such as per-batch lengths).
    regime: a coarse class used as a search feature, e.g. "short" or "long" context.
    hidden: hidden scenarios are drawn from the evaluator's secret seed, checked for
            correctness only, and never shown to a candidate or an LLM.
    """

    name: str
    params: Mapping[str, Any]
    regime: str = ""
    hidden: bool = False

    def describe(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.name}({inner})"


@dataclass(frozen=True)
class Tolerance:
    """Pass when both hold (out and ref compared in float64):

    ||out - ref||_2 / ||ref||_2 <= rel_l2
    max|out - ref| / max|ref|   <= max_abs_rel
    """

    rel_l2: float
    max_abs_rel: float


@dataclass(frozen=True)
class OutputSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass
class Task(ABC):
    """Base class of a kernel task. Subclasses live in `evokernel.tasks.<name>`."""

    name: str
    entry_point: str
    interface: str
    description: str
    seed_candidate: Path
    # Device kind ("cuda" | "cpu") -> dtypes a candidate is checked in (first one is timed).
    dtypes: Mapping[str, tuple[torch.dtype, ...]] = field(default_factory=dict)
    # The engine op its candidates implement (ops/candidates.py OP_TASKS), if any.
    op: str | None = None

    # --- scenarios -------------------------------------------------------------------------
    @abstractmethod
    def scenarios(self, device: str) -> list[Scenario]:
        """Public scenarios, timed against the baselines. On "cpu" they are small enough for
        the Triton interpreter."""

    @abstractmethod
    def hidden_scenarios(self, device: str, seed: int) -> list[Scenario]:
        """Correctness-only scenarios drawn from `seed` (odd sizes, other ratios, extremes)."""

    # --- inputs ----------------------------------------------------------------------------
    @abstractmethod
    def make_inputs(
        self, scenario: Scenario, seed: int, dtype: torch.dtype, device: str = "cpu"
    ) -> Inputs:
        """Fresh inputs for one call, built on `device`. Memory the candidate must not read
        holds junk."""

    @abstractmethod
    def perturb(self, inputs: Inputs, seed: int) -> None:
        """Overwrite the per-call inputs (e.g. the query) in place with new values drawn from
        `seed`, keeping their storage: contents change between timed calls, pointers do not."""

    @abstractmethod
    def output_spec(self, inputs: Inputs) -> OutputSpec:
        """Shape and dtype the candidate must return for these inputs."""

    # --- judging ---------------------------------------------------------------------------
    @abstractmethod
    def reference(self, inputs: Inputs) -> torch.Tensor:
        """The exact answer in float64 (TF32 off), computed on the inputs' device and
        returned on the CPU."""

    @abstractmethod
    def tolerance(self, dtype: torch.dtype) -> Tolerance: ...

    # --- timing ----------------------------------------------------------------------------
    @abstractmethod
    def baselines(self, scenario: Scenario) -> dict[str, Callable[..., torch.Tensor]]:
        """Stock implementations a user would otherwise call, applicable to `scenario`,
        called with the same keyword arguments as the candidate."""

    @abstractmethod
    def bytes_moved(self, scenario: Scenario, dtype: torch.dtype) -> int:
        """The fewest bytes of device memory one call must read and write."""

    @abstractmethod
    def flops(self, scenario: Scenario) -> int: ...

    # --- in-place outputs and graph timing (see the module doc) --------------------------
    writes: tuple[str, ...] = ()
    graph_layers: int = 0

    def observe(
        self, inputs: Inputs, out: Any, before: Mapping[str, torch.Tensor] | None = None
    ) -> torch.Tensor | str:
        """The tensor judged against `reference` for one call that returned `out`; `before`
        (the written inputs' contents before the call, during correctness checks) lets the
        task report a stray write as a reason line. Default: `out` itself."""
        return out  # type: ignore[no-any-return]

    def rotating_bytes(self, scenario: Scenario, dtype: torch.dtype) -> int:
        """Bytes of one input set that a real workload reads cold (weights, KV cache); the
        evaluator keeps enough copies to exceed the L2 cache, or flushes it."""
        return self.bytes_moved(scenario, dtype)
