"""Shapes of `decode_layer`: one decoder layer's decode step, public and hidden scenarios.

params: the model shape H (hidden), Hq, Hkv (query and kv heads), D (head dim), I
(intermediate), the family's switches qkv_bias (q/k/v biases: qwen2) and qk_norm (per-head
q/k RMSNorm: qwen3), and the step's B (sequences), S_max (cache positions) and seq_lens (a tuple of
B ints, 1 <= seq_lens[b] <= S_max; the token is written at seq_lens[b] - 1). The entry point's
`max_len` is S_max (the engine passes the bound of its context bucket, >= every length).

Public scenarios are the task's shape (Qwen3-0.6B for plain `decode_layer`) at B = 1 and
contexts 128, 512, 2k, 8k and 32k, each with about 1/8 spare cache positions (junk). Regime (a
MAP-Elites feature): "short" up to 1k positions, "long" beyond. On the CPU the shapes shrink
for Triton's interpreter (H 128, two kv heads with the task's group size, D 32, I 192, unless
the task's shape is that small already; contexts 1, 17, 100 and 300) and the regimes with
them: "short" up to 64 positions, "long" beyond.

Hidden scenarios are drawn from the evaluator's secret seed: other shapes of the task's family
(hidden 2048, 2560 or 4096 with 16:8 or 32:8 heads, head_dim 64 as well as 128, Qwen3's
intermediate sizes; the family's switches kept),
odd contexts, B > 1 with mixed lengths, seq_len = 1 everywhere, a long context; on the CPU the
same classes at interpreter sizes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from evokernel.tasks.base import Scenario
from evokernel.tasks.rng import py_rng


@dataclass(frozen=True)
class Shape:
    """A decoder layer's shape: hidden, query heads, kv heads, head dim, intermediate, and the
    family's switches (Qwen3's by default: q/k norms, no biases)."""

    H: int
    Hq: int
    Hkv: int
    D: int
    I: int  # noqa: E741 (the intermediate size, as the configs name it)
    qkv_bias: bool = False
    qk_norm: bool = True

    def spec(self) -> str:
        """The task-name suffix: `H1024-Hq16-Hkv8-D128-I3072`, then `-bias` for q/k/v biases
        and `-noqknorm` for a family without q/k norms."""
        base = f"H{self.H}-Hq{self.Hq}-Hkv{self.Hkv}-D{self.D}-I{self.I}"
        return base + ("-bias" if self.qkv_bias else "") + ("" if self.qk_norm else "-noqknorm")

    def params(self) -> dict[str, int | bool]:
        return {
            "H": self.H, "Hq": self.Hq, "Hkv": self.Hkv, "D": self.D, "I": self.I,
            "qkv_bias": self.qkv_bias, "qk_norm": self.qk_norm,
        }  # fmt: skip


QWEN3_06B = Shape(H=1024, Hq=16, Hkv=8, D=128, I=3072)
# Other Qwen3 dense shapes (hidden -> intermediate): 1.7B, 4B, 8B.
QWEN3_INTERMEDIATE = {2048: 6144, 2560: 9728, 4096: 12288}
GPU_CONTEXTS = (128, 512, 2048, 8192, 32768)
CPU_CONTEXTS = (1, 17, 100, 300)
SHORT_MAX = {"cuda": 1024, "cpu": 64}  # longest "short" context per device


def cpu_shape(shape: Shape) -> Shape:
    """`shape` itself where the interpreter runs it quickly (a tiny test model's), else its
    stand-in: H 128, two kv heads with its group size, D 32, I 192."""
    if shape.H <= 256 and shape.I <= 512 and shape.Hq <= 8 and shape.D <= 64:
        return shape
    return replace(shape, H=128, Hq=2 * (shape.Hq // shape.Hkv), Hkv=2, D=32, I=192)


def s_max(ctx: int) -> int:
    """Cache capacity for a public context: about 1/8 spare positions, a multiple of 16."""
    return -(-(ctx + ctx // 8 + 1) // 16) * 16


def regime(device: str, lens: tuple[int, ...]) -> str:
    return "short" if max(lens) <= SHORT_MAX["cuda" if device != "cpu" else "cpu"] else "long"


def make_scenario(
    name: str,
    shape: Shape,
    S_max: int,
    lens: tuple[int, ...],
    device: str,
    hidden: bool = False,
) -> Scenario:
    assert lens and all(1 <= n <= S_max for n in lens), (lens, S_max)
    params = {**shape.params(), "B": len(lens), "S_max": S_max, "seq_lens": tuple(lens)}
    return Scenario(name, params, regime=regime(device, lens), hidden=hidden)


def public_scenarios(shape: Shape, device: str) -> list[Scenario]:
    if device == "cpu":
        small = cpu_shape(shape)
        return [make_scenario(f"b1_ctx{n}", small, s_max(n), (n,), "cpu") for n in CPU_CONTEXTS]
    return [make_scenario(f"b1_ctx{n}", shape, s_max(n), (n,), device) for n in GPU_CONTEXTS]


def _odd(rng: random.Random, low: int, high: int) -> int:
    """A length in [low, high] that is no multiple of 2 (so of no power-of-two tile)."""
    return rng.randrange(low | 1, high + 1, 2)


@dataclass(frozen=True)
class _Ranges:
    """Length ranges of the hidden draws on one device (CPU sizes suit the interpreter)."""

    odd: tuple[int, int]  # a single odd context at another shape
    mixed_max: int  # longest length in a mixed batch
    long: tuple[int, int]  # one long context (the split path)
    batch: int  # sequences in the mixed batch


_CPU = _Ranges(odd=(19, 150), mixed_max=90, long=(257, 400), batch=3)
_GPU = _Ranges(odd=(1001, 6000), mixed_max=2048, long=(10001, 20001), batch=8)


def _other_shape(rng: random.Random, device: str, D: int, family: Shape) -> Shape:
    """Another shape with head dim D and `family`'s switches (hidden 2048 / 2560 / 4096 with
    Qwen3's intermediate size for it, 16:8 or 32:8 heads), or on the CPU its interpreter-sized
    stand-in (odd hidden and intermediate sizes, two kv heads with the group size 2 or 4)."""
    Hq = rng.choice((16, 32))
    if device == "cpu":
        H, Hq, Hkv, inter = rng.choice((96, 160, 200)), Hq // 4, 2, _odd(rng, 101, 301)
    else:
        H = rng.choice(tuple(QWEN3_INTERMEDIATE))
        Hkv, inter = 8, QWEN3_INTERMEDIATE[H]
    return replace(family, H=H, Hq=Hq, Hkv=Hkv, D=D, I=inter)


def hidden_scenarios(shape: Shape, device: str, seed: int) -> list[Scenario]:
    rng = py_rng(seed, "decode_layer", "hidden", device, shape.spec())
    cpu = device == "cpu"
    r = _CPU if cpu else _GPU
    own = cpu_shape(shape) if cpu else shape

    def hidden(kind: str, at: Shape, lens: list[int], spare: int = 0) -> Scenario:
        S = max(lens) + spare
        name = f"hidden_{kind}_h{at.H}_{at.Hq}x{at.Hkv}_d{at.D}_i{at.I}_b{len(lens)}_s{S}"
        return make_scenario(name, at, S, tuple(lens), device, hidden=True)

    out = []
    # another shape (head_dim 128; 32 on the CPU), an odd context
    other = _other_shape(rng, device, 32 if cpu else 128, shape)
    out.append(hidden("shape", other, [_odd(rng, *r.odd)], rng.randrange(1, 40)))
    # head_dim 64 at another shape, two sequences of odd, different lengths
    d64 = _other_shape(rng, device, 64, shape)
    out.append(hidden("d64", d64, [_odd(rng, 3, r.odd[1]), _odd(rng, 3, r.odd[1])], 7))
    # the task's shape, a mixed batch: one fresh sequence (length 1) among random lengths
    lens = [1] + [rng.randrange(2, r.mixed_max + 1) for _ in range(r.batch - 1)]
    rng.shuffle(lens)
    out.append(hidden("mixed", own, lens, rng.randrange(0, 33)))
    # every sequence at its first token (seq_len 1), a small cache
    out.append(hidden("len1", own, [1, 1], rng.randrange(1, 64)))
    # one long context (split attention), cache exactly full on one draw in two
    out.append(hidden("long", own, [_odd(rng, *r.long)], rng.choice((0, 9))))
    # odd lengths, B = 5
    out.append(hidden("odd", own, [_odd(rng, 2, r.odd[1]) for _ in range(5)], 3))
    return out
