"""Shapes of `decode_linear` (y = x @ W^T, x [M, K], W [N, K]): public and hidden scenarios.

Public GPU scenarios are Qwen3-0.6B's projections at decode (M = 1; two also at M = 8):
qkv 1024 -> 4096, o 2048 -> 1024, gate+up 1024 -> 6144, down 3072 -> 1024 and the tied
lm_head 1024 -> 151936. CPU scenarios keep the same roles at interpreter-friendly sizes.

Regime (a MAP-Elites feature): "narrow" when N <= K (few output columns over a deep K: too few
column tiles to fill the GPU, so split-K matters), else "wide".

Hidden scenarios, drawn from the evaluator's secret seed: N and K that are no multiple of 64
(or of any power-of-two tile), M in {1, 3, 5, 8}, the smallest sizes (N, K down to 1) and large
ones (a wide N in the tens of thousands, a deep K of several thousand on the GPU).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from evokernel.tasks.base import Scenario
from evokernel.tasks.rng import py_rng


def regime(N: int, K: int) -> str:
    return "narrow" if N <= K else "wide"


def _scenario(name: str, M: int, N: int, K: int, hidden: bool = False) -> Scenario:
    return Scenario(name, {"M": M, "N": N, "K": K}, regime=regime(N, K), hidden=hidden)


def public_scenarios(device: str) -> list[Scenario]:
    if device == "cpu":
        return [
            _scenario("qkv_m1", 1, 384, 128),
            _scenario("o_m1", 1, 128, 256),
            _scenario("down_m1", 1, 128, 384),
            _scenario("lm_head_m1", 1, 1000, 128),
            _scenario("qkv_m8", 8, 384, 128),
            _scenario("down_m8", 8, 128, 384),
        ]
    return [
        _scenario("qkv_m1", 1, 4096, 1024),
        _scenario("o_m1", 1, 1024, 2048),
        _scenario("gate_up_m1", 1, 6144, 1024),
        _scenario("down_m1", 1, 1024, 3072),
        _scenario("lm_head_m1", 1, 151936, 1024),
        _scenario("qkv_m8", 8, 4096, 1024),
        _scenario("down_m8", 8, 1024, 3072),
    ]


def _odd(rng: random.Random, low: int, high: int) -> int:
    """A size in [low, high] that is odd, so no multiple of any power-of-two tile."""
    return rng.randrange(low | 1, high + 1, 2)


@dataclass(frozen=True)
class _Ranges:
    """Size ranges of the hidden draws on one device (CPU sizes suit the interpreter)."""

    odd: int  # upper bound of the small odd sizes
    mid: tuple[int, int]
    wide: tuple[int, int]
    deep: tuple[int, int]
    rand: int
    down: tuple[int, int]  # Qwen3-0.6B's down projection (N, K), or its CPU stand-in


_CPU = _Ranges(odd=100, mid=(100, 400), wide=(300, 350), deep=(400, 900), rand=500, down=(128, 384))
_GPU = _Ranges(
    odd=1000, mid=(1000, 4000), wide=(30000, 35000), deep=(4000, 9000), rand=5000, down=(1024, 3072)
)


def hidden_scenarios(device: str, seed: int) -> list[Scenario]:
    rng = py_rng(seed, "decode_linear", "hidden", device)
    r = _CPU if device == "cpu" else _GPU

    def hidden(kind: str, M: int, N: int, K: int) -> Scenario:
        return _scenario(f"hidden_{kind}_m{M}_n{N}_k{K}", M, N, K, hidden=True)

    return [
        hidden("tiny", 1, rng.randint(1, 7), rng.randint(1, 15)),
        hidden("odd", 3, _odd(rng, 65, r.odd), _odd(rng, 65, r.odd)),
        hidden("mid", 5, _odd(rng, *r.mid), _odd(rng, *r.mid)),
        hidden("wide", 8, _odd(rng, *r.wide), _odd(rng, 65, 2 * r.odd)),
        hidden("deep", 1, _odd(rng, 17, r.odd), _odd(rng, *r.deep)),
        hidden("random", rng.choice((1, 3, 5, 8)), rng.randint(1, r.rand), rng.randint(1, r.rand)),
        hidden("qwen_down", rng.choice((3, 5)), *r.down),
    ]
