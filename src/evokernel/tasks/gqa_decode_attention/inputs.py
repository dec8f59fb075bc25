"""Seeded inputs of `gqa_decode_attention`, with junk past each sequence's length.

Valid positions come from one of three distributions (chosen by seed and scenario):
  normal   q, K, V ~ N(0, 1): scores ~ N(0, 1), a flat softmax over the context.
  peaked   q ~ N(0, 3^2): scores spread ~3, most weight on a few keys.
  shifted  K gets a large per-head offset common to every position (the score's common part
           cancels in the softmax), V ~ U(-1, 3) (output far from zero).

Junk at positions [seq_lens[b], S_max) of the cache:
  K  NaN in some input sets ("nan"), large finite values of random sign in others ("finite"),
     by seed and scenario (`junk_kind`). A kernel that lets a masked score reach the softmax
     fails either way.
  V  always large and finite (random sign, magnitude drawn per set): p = 0 times junk is 0 for
     a correctly masked kernel, while NaN in V would turn even a correct p @ V into NaN.
Magnitudes stay within float16's range, and finite K junk stays small enough (<= ~300) that
q @ K^T cannot overflow a float16 product in a stock baseline.

Everything is drawn in float32 from a generator on the target device and cast to the requested
dtype: the same (scenario, seed, dtype) gives bit-identical tensors in any process on the CPU,
and in any process on the same GPU model (tasks/rng.py).
"""

from __future__ import annotations

import torch

from evokernel.tasks.base import Inputs, Scenario
from evokernel.tasks.rng import derive_seed, generator, randn, signs, uniform

DISTRIBUTIONS = ("normal", "peaked", "shifted")
JUNK_KINDS = ("nan", "finite")
# log10 ranges of junk magnitudes by dtype: (K finite junk, V junk)
_JUNK_LOG10 = {
    torch.float16: ((1.5, 2.5), (3.0, 4.3)),
    "default": ((1.5, 2.5), (3.0, 30.0)),
}


def distribution(scenario: Scenario, seed: int) -> str:
    return DISTRIBUTIONS[derive_seed(seed, scenario.name, "dist") % len(DISTRIBUTIONS)]


def junk_kind(scenario: Scenario, seed: int) -> str:
    """ "nan" or "finite": what K holds past seq_lens for this input set. Stock baselines with
    an additive mask (SDPA) turn NaN keys into NaN outputs, so they are valid on "finite" sets
    only; a candidate must be correct on both."""
    return JUNK_KINDS[derive_seed(seed, scenario.name, "junk") % len(JUNK_KINDS)]


def _query(shape: tuple[int, ...], dist: str, g: torch.Generator) -> torch.Tensor:
    q = randn(shape, g)
    return q * 3.0 if dist == "peaked" else q


def make_inputs(
    scenario: Scenario, seed: int, dtype: torch.dtype, device: str | torch.device = "cpu"
) -> Inputs:
    p = scenario.params
    B, Hkv, S_max, D = p["B"], p["Hkv"], p["S_max"], p["D"]
    seq_lens = tuple(p["seq_lens"])
    assert len(seq_lens) == B and all(1 <= n <= S_max for n in seq_lens)
    dist = distribution(scenario, seed)
    g = generator(seed, scenario.name, "gqa_decode_attention", device=device)
    cache = (B, Hkv, S_max, D)

    q = _query((B, p["Hq"], D), dist, g)
    k = randn(cache, g)
    if dist == "shifted":
        v = uniform(cache, g, -1.0, 3.0)
        k += 4.0 * randn((1, Hkv, 1, D), g)
    else:
        v = randn(cache, g)

    (k_lo, k_hi), (v_lo, v_hi) = _JUNK_LOG10.get(dtype, _JUNK_LOG10["default"])
    kind = junk_kind(scenario, seed)
    for b, n in enumerate(seq_lens):
        if n == S_max:
            continue
        junk = (Hkv, S_max - n, D)
        if kind == "nan":
            k[b, :, n:] = float("nan")
        else:
            k[b, :, n:] = signs(junk, g) * 10.0 ** uniform(junk, g, k_lo, k_hi)
        v[b, :, n:] = signs(junk, g) * 10.0 ** uniform((), g, v_lo, v_hi)

    return {
        "q": q.to(dtype),
        "k_cache": k.to(dtype),
        "v_cache": v.to(dtype),
        "seq_lens": torch.tensor(seq_lens, dtype=torch.int32, device=g.device),
        "scale": float(D) ** -0.5,
    }


def perturb(inputs: Inputs, seed: int) -> None:
    """New queries in place (same storage, any device; flat or peaked by seed); the cache and
    lengths stay, so a result cached across calls goes stale."""
    q = inputs["q"]
    dist = DISTRIBUTIONS[derive_seed(seed, "perturb", "dist") % 2]
    g = generator(seed, "gqa_decode_attention", "perturb", device=q.device)
    fresh = _query(tuple(q.shape), dist, g)
    q.copy_(fresh.to(q.dtype))
