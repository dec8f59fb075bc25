"""The `decode_linear` task: y = x @ W^T at decode, x [M, K] with M = 1..8, W [N, K].

Reference: float64 on the inputs' device, in row chunks of W (the lm_head would be 1.2 GB in
float64), returned on the CPU.
Baseline: `F.linear` (cuBLAS on the GPU). Roofline: bytes_moved = x + W + y; rotating_bytes =
W's bytes, which a real decode step reads cold (the evaluator rotates enough weight copies to
defeat the L2 cache).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from evokernel.tasks.base import DEVICE_DTYPES, Inputs, OutputSpec, Scenario, Task, Tolerance
from evokernel.tasks.decode_linear import inputs as _inputs
from evokernel.tasks.decode_linear import scenarios as _scenarios

SEED = Path(__file__).with_name("seed.py")  # the seed candidate, loaded by path

INTERFACE = '''def linear(x, weight):
    """y = x @ weight^T for a decode step.

    x:       [M, K]  activations, M = 1..8
    weight:  [N, K]  weights, x's dtype
    returns  [M, N]  in x's dtype
    """'''

DESCRIPTION = (
    "A decode-time projection y = x @ W^T with a handful of rows (M = 1..8). Memory-bound: "
    "time is set by reading W once. Qwen3-0.6B's narrow, deep projections (o: 2048 -> 1024, "
    "down: 3072 -> 1024) have too few output tiles to fill the GPU, so split-K matters there; "
    "the lm_head (1024 -> 151936) is a pure bandwidth test."
)

# Tolerances: worst case over the public and hidden scenarios of both devices, seeds 0-2, of
# float32-accumulating emulations (docs/tasks.md; tests/tasks/test_tolerances.py re-checks the
# CPU side). With float32 accumulation the error is the rounding of y (unit roundoff u).
#   float32   correct: rel L2 <= 3e-7, max-abs-rel <= 5.5e-7. The same math on float16-rounded
#             inputs: >= 1.6e-4 / 1.3e-4. 1e-5 rejects it with a 10x margin.
#   float16   correct (u = 4.9e-4): <= 3.5e-4 / 4.5e-4; bfloat16 arithmetic: >= 1.2e-3 / 1.2e-3.
#             (1e-3, 2e-3) passes correct kernels with a 3-4x margin.
#   bfloat16  correct (u = 3.9e-3, which bounds it): <= 3.0e-3 / 3.6e-3; float8 (e4m3)
#             arithmetic: >= 2.3e-2 / 2.3e-2. (1e-2, 2e-2) sits between.
TOLERANCES = {
    torch.float32: Tolerance(rel_l2=1e-5, max_abs_rel=1e-5),
    torch.float16: Tolerance(rel_l2=1e-3, max_abs_rel=2e-3),
    torch.bfloat16: Tolerance(rel_l2=1e-2, max_abs_rel=2e-2),
}

_REF_ROWS = 8192  # weight rows per float64 chunk of the reference (64 MB at K = 1024)


def reference(inputs: Inputs) -> torch.Tensor:
    """float64 on the inputs' device, returned on the CPU. Returns [M, N]."""
    x = inputs["x"].detach().to(torch.float64)
    weight = inputs["weight"].detach()
    N = weight.shape[0]
    out = torch.empty((x.shape[0], N), dtype=torch.float64, device=x.device)
    for n0 in range(0, N, _REF_ROWS):
        out[:, n0 : n0 + _REF_ROWS] = x @ weight[n0 : n0 + _REF_ROWS].to(torch.float64).T
    return out.cpu()


def torch_linear(x, weight):
    """Stock F.linear (cuBLAS on the GPU)."""
    return F.linear(x, weight)


@dataclass
class DecodeLinear(Task):
    name: str = "decode_linear"
    entry_point: str = "linear"
    op: str | None = "linear"
    interface: str = INTERFACE
    description: str = DESCRIPTION
    seed_candidate: Path = SEED
    dtypes: Mapping[str, tuple[torch.dtype, ...]] = field(default_factory=lambda: DEVICE_DTYPES)

    def scenarios(self, device: str) -> list[Scenario]:
        return _scenarios.public_scenarios(device)

    def hidden_scenarios(self, device: str, seed: int) -> list[Scenario]:
        return _scenarios.hidden_scenarios(device, seed)

    def make_inputs(
        self, scenario: Scenario, seed: int, dtype: torch.dtype, device: str = "cpu"
    ) -> Inputs:
        return _inputs.make_inputs(scenario, seed, dtype, device)

    def perturb(self, inputs: Inputs, seed: int) -> None:
        _inputs.perturb(inputs, seed)

    def output_spec(self, inputs: Inputs) -> OutputSpec:
        x, weight = inputs["x"], inputs["weight"]
        return OutputSpec(shape=(x.shape[0], weight.shape[0]), dtype=x.dtype)

    def reference(self, inputs: Inputs) -> torch.Tensor:
        return reference(inputs)

    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        return TOLERANCES[dtype]

    def baselines(self, scenario: Scenario) -> dict[str, Callable[..., torch.Tensor]]:
        return {"F.linear": torch_linear}

    def bytes_moved(self, scenario: Scenario, dtype: torch.dtype) -> int:
        M, N, K = (scenario.params[k] for k in ("M", "N", "K"))
        e = torch.empty((), dtype=dtype).element_size()
        return (M * K + N * K + M * N) * e

    def flops(self, scenario: Scenario) -> int:
        M, N, K = (scenario.params[k] for k in ("M", "N", "K"))
        return 2 * M * N * K

    def rotating_bytes(self, scenario: Scenario, dtype: torch.dtype) -> int:
        N, K = scenario.params["N"], scenario.params["K"]
        return N * K * torch.empty((), dtype=dtype).element_size()


def task() -> DecodeLinear:
    return DecodeLinear()
