"""Seeded inputs of `decode_linear`: x [M, K] and weight [N, K] in one dtype.

Distributions (chosen by seed and scenario); weights are scaled by 1/sqrt(K) like an
initialised layer, so y ~ O(1):
  normal    x ~ N(0, 1), W ~ N(0, 1/K).
  outlier   as normal, with ~1% of x's channels scaled by 30 (the activation outliers of LLMs).
  uniform   x ~ U(-1, 2) (a mean offset), W ~ U(-a, a) with a = sqrt(3/K).
Drawn in float32 from a generator on the target device and cast (tasks/rng.py).
"""

from __future__ import annotations

import torch

from evokernel.tasks.base import Inputs, Scenario
from evokernel.tasks.rng import derive_seed, generator, randn, uniform

DISTRIBUTIONS = ("normal", "outlier", "uniform")


def distribution(scenario: Scenario, seed: int) -> str:
    return DISTRIBUTIONS[derive_seed(seed, scenario.name, "dist") % len(DISTRIBUTIONS)]


def _activations(shape: tuple[int, int], dist: str, g: torch.Generator) -> torch.Tensor:
    if dist == "uniform":
        return uniform(shape, g, -1.0, 2.0)
    x = randn(shape, g)
    if dist == "outlier":
        channels = torch.rand((shape[1],), generator=g, device=g.device) < 0.01
        x[:, channels] *= 30.0
    return x


def make_inputs(
    scenario: Scenario, seed: int, dtype: torch.dtype, device: str | torch.device = "cpu"
) -> Inputs:
    M, N, K = (scenario.params[k] for k in ("M", "N", "K"))
    dist = distribution(scenario, seed)
    g = generator(seed, scenario.name, "decode_linear", device=device)
    x = _activations((M, K), dist, g)
    if dist == "uniform":
        a = (3.0 / K) ** 0.5
        weight = uniform((N, K), g, -a, a)
    else:
        weight = randn((N, K), g).mul_(K**-0.5)
    return {"x": x.to(dtype), "weight": weight.to(dtype)}


def perturb(inputs: Inputs, seed: int) -> None:
    """New activations in place (same storage, any device); the weight stays."""
    x = inputs["x"]
    dist = DISTRIBUTIONS[derive_seed(seed, "perturb", "dist") % len(DISTRIBUTIONS)]
    g = generator(seed, "decode_linear", "perturb", device=x.device)
    fresh = _activations(tuple(x.shape), dist, g)
    x.copy_(fresh.to(x.dtype))
