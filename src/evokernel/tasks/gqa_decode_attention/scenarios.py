"""Shapes of `gqa_decode_attention`: public (timed) and hidden (correctness-only) scenarios.

params: B, Hq, Hkv, D, S_max and seq_lens (a tuple of B ints, 1 <= seq_lens[b] <= S_max).
The cache holds S_max positions; those past seq_lens[b] hold junk a kernel must ignore, so every
public scenario has S_max > context.

Regimes (a MAP-Elites feature of the search): "short" context up to 1k positions, "long" from
4k on. CPU scenarios are scaled for the Triton interpreter (contexts 1..~320, few heads), and
scale the regimes with them: "short" up to 64 positions, "long" from 200 on.

Hidden scenarios are drawn from the evaluator's secret seed: every draw covers other GQA ratios
(5:1, 4:1, 1:1 as well as 2:1), D=64, lengths that are no multiple of any tile, mixed lengths in
a batch, seq_len = 1, seq_len = S_max, S_max = 1 and B > 1. On the GPU the ratios are the real
40:8, 32:8, 8:8 and 16:8; on the CPU the same ratios with 2 kv heads.
"""

from __future__ import annotations

import random

from evokernel.tasks.base import Scenario
from evokernel.tasks.rng import py_rng

QWEN3_06B = {"Hq": 16, "Hkv": 8, "D": 128}


def _s_max(ctx: int) -> int:
    """Cache capacity for a public context: about 1/8 spare positions, a multiple of 16."""
    return -(-(ctx + ctx // 8 + 1) // 16) * 16


def _public(name: str, B: int, ctx: int, regime: str, heads: dict[str, int]) -> Scenario:
    params = {"B": B, **heads, "S_max": _s_max(ctx), "seq_lens": (ctx,) * B}
    return Scenario(name=name, params=params, regime=regime)


def public_scenarios(device: str) -> list[Scenario]:
    if device == "cpu":
        heads = {"Hq": 4, "Hkv": 2, "D": 128}  # Qwen3's 2:1 ratio and head dim, fewer heads
        return [
            _public("b1_ctx16", 1, 16, "short", heads),
            _public("b1_ctx64", 1, 64, "short", heads),
            _public("b1_ctx256", 1, 256, "long", heads),
            _public("b3_ctx200", 3, 200, "long", heads),
        ]
    return [
        _public("b1_ctx128", 1, 128, "short", QWEN3_06B),
        _public("b1_ctx512", 1, 512, "short", QWEN3_06B),
        _public("b1_ctx1024", 1, 1024, "short", QWEN3_06B),
        _public("b1_ctx4096", 1, 4096, "long", QWEN3_06B),
        _public("b1_ctx16384", 1, 16384, "long", QWEN3_06B),
        _public("b1_ctx65536", 1, 65536, "long", QWEN3_06B),
        _public("b8_ctx1024", 8, 1024, "short", QWEN3_06B),
    ]


def _odd(rng: random.Random, low: int, high: int) -> int:
    """A length in [low, high] that is no multiple of 2 (so of no power-of-two tile)."""
    return rng.randrange(low | 1, high + 1, 2)


def hidden_scenarios(device: str, seed: int) -> list[Scenario]:
    rng = py_rng(seed, "gqa_decode_attention", "hidden", device)
    cpu = device == "cpu"
    # (Hq, Hkv) by group size: 5:1, 4:1, 1:1, 2:1
    if cpu:
        # The same group sizes with few heads (two kv heads, so a wrong head mapping shows):
        # the interpreter's cost grows with the number of programs (B * Hq * SPLIT for the seed).
        ratios = [(10, 2), (8, 2), (2, 2), (4, 2)]
        short, long_lo, long_hi = 120, 200, 321
    else:
        ratios = [(40, 8), (32, 8), (8, 8), (16, 8)]
        short, long_lo, long_hi = 3000, 5000, 20001
    r51, r41, r11, r21 = ratios

    def scenario(kind: str, hq_hkv: tuple[int, int], D: int, s_max: int, lens: list[int]):
        Hq, Hkv = hq_hkv
        assert all(1 <= n <= s_max for n in lens)
        params = {"B": len(lens), "Hq": Hq, "Hkv": Hkv, "D": D, "S_max": s_max}
        params_lens = {**params, "seq_lens": tuple(lens)}
        name = f"hidden_{kind}_b{len(lens)}_h{Hq}x{Hkv}_d{D}_s{s_max}"
        regime = "long" if max(lens) >= long_lo else "short"
        return Scenario(name=name, params=params_lens, regime=regime, hidden=True)

    out = []
    n = _odd(rng, 33, short)
    out.append(scenario("ratio5", r51, 128, n + rng.randrange(1, 40), [n]))
    s_max = _odd(rng, 65, short)
    lens = [_odd(rng, 1, s_max), rng.randrange(1, s_max + 1)]
    out.append(scenario("ratio4_d64", r41, 64, s_max, lens))
    s_max = _odd(rng, 33, short)
    out.append(scenario("mha", r11, 128, s_max, [1, _odd(rng, 3, s_max), s_max]))
    n = _odd(rng, 17, short)
    out.append(scenario("full_d64", r21, 64, n, [n]))
    out.append(scenario("len1", r21, 128, rng.randrange(2, 64), [1, 1]))
    hq_hkv = rng.choice(ratios)
    s_max = _odd(rng, 65, short)
    lens = [1, s_max, _odd(rng, 2, s_max)]
    rng.shuffle(lens)
    out.append(scenario("mixed", hq_hkv, rng.choice((64, 128)), s_max, lens))
    n = _odd(rng, long_lo, long_hi)
    out.append(scenario("long", r21, 128, n + rng.randrange(1, 100), [n]))
    out.append(scenario("smax1", r21, rng.choice((64, 128)), 1, [1]))
    if cpu:
        s_max = _odd(rng, 33, short)
        out.append(scenario("b2", r21, 128, s_max, [_odd(rng, 1, s_max), s_max]))
    else:
        lens = [rng.randrange(1, 2049) for _ in range(8)]
        out.append(scenario("b8", r21, 128, max(lens) + rng.randrange(0, 64), lens))
    return out
