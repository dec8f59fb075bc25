"""Seeded inputs of `decode_layer`: a decoder layer's weights (the family's q/k/v biases and
q/k norms where the scenario's shape has them, else None), the residual stream, RoPE tables
and a KV cache with junk past each sequence's earlier tokens.

Magnitudes are those of an initialised model (weights N(0, 0.02^2), norm weights 1 + N(0,
0.1^2), biases N(0, 0.1^2), the residual stream h ~ N(0, 1)). Without q/k norms the keys' and
queries' scale comes from the projection (RMS ~0.02 sqrt(H)), so the cache's earlier keys are
drawn at that scale too. Two distributions, chosen by seed and scenario:
  normal   q/k norm weights ~ 1: scores ~ N(0, 1), attention spread over the context.
  peaked   q/k norm weights ~ 2: scores spread ~4, most weight on a few keys (the attention
           output, and so its error, then reaches the residual stream at full size).

Cache rows [0, positions[b]) hold earlier tokens: K ~ N(0, 1) times the k norm weights' size
(normed keys), V ~ N(0, sigma^2) with sigma = 0.02 sqrt(H) (a projection of a normed row).
Rows [positions[b], S_max) hold large finite junk of random sign (K 10^1.5..10^2.5, V up to
10^4.3 in float16, 10^8 otherwise): the row at positions[b] must be written before it is read
(a candidate that leaves it is judged on junk), rows past it must never be read. Never NaN: the
torch-ops layer multiplies masked probabilities by V.

positions = seq_lens - 1 (int32), cos/sin = `evokernel.ops.rope.rope_table(D, 1e6, S_max)`
(Qwen3's theta; float32 [S_max, D/2]; a scaling rule changes the table only), scale = D^-0.5,
eps = 1e-6, max_len = S_max.

Everything is drawn in float32 from a generator on the target device and cast (tasks/rng.py):
the same (scenario, seed, dtype) gives bit-identical tensors in any process on the CPU, and on
the same GPU model.
"""

from __future__ import annotations

import torch

from evokernel.ops.rope import rope_table
from evokernel.tasks.base import Inputs, Scenario
from evokernel.tasks.rng import derive_seed, generator, randn, signs, uniform

DISTRIBUTIONS = ("normal", "peaked")
ROPE_THETA = 1_000_000.0
EPS = 1e-6
WEIGHT_STD = 0.02
# log10 ranges of junk magnitudes by dtype: (K junk, V junk)
_JUNK_LOG10 = {
    torch.float16: ((1.5, 2.5), (3.0, 4.3)),
    "default": ((1.5, 2.5), (3.0, 8.0)),
}


def distribution(scenario: Scenario, seed: int) -> str:
    return DISTRIBUTIONS[derive_seed(seed, scenario.name, "dist") % len(DISTRIBUTIONS)]


def make_inputs(
    scenario: Scenario, seed: int, dtype: torch.dtype, device: str | torch.device = "cpu"
) -> Inputs:
    p = scenario.params
    H, Hq, Hkv, D, inter = (p[k] for k in ("H", "Hq", "Hkv", "D", "I"))
    B, S = p["B"], p["S_max"]
    seq_lens = tuple(p["seq_lens"])
    assert len(seq_lens) == B and all(1 <= n <= S for n in seq_lens), (seq_lens, S)
    g = generator(seed, scenario.name, "decode_layer", device=device)
    qk_gain = 2.0 if distribution(scenario, seed) == "peaked" else 1.0

    def weight(rows: int, cols: int) -> torch.Tensor:
        return randn((rows, cols), g).mul_(WEIGHT_STD)

    def norm(n: int, gain: float = 1.0) -> torch.Tensor:
        return randn((n,), g).mul_(0.1).add_(1.0).mul_(gain)

    h = randn((B, H), g)
    input_norm = norm(H)
    qkv_proj = weight((Hq + 2 * Hkv) * D, H)
    q_norm, k_norm = norm(D, qk_gain), norm(D, qk_gain)
    o_proj = weight(H, Hq * D)
    post_attn_norm = norm(H)
    gate_up_proj = weight(2 * inter, H)
    down_proj = weight(H, inter)
    qkv_bias = randn(((Hq + 2 * Hkv) * D,), g).mul_(0.1)
    qk_norms = bool(p.get("qk_norm", True))
    if not qk_norms:  # the queries' size then comes from the projection alone: steer it
        qkv_proj[: (Hq + Hkv) * D].mul_(qk_gain / (WEIGHT_STD * H**0.5))
    key_scale = qk_gain

    cache = (B, Hkv, S, D)
    k = randn(cache, g).mul_(key_scale)
    v = randn(cache, g).mul_(WEIGHT_STD * H**0.5)
    (k_lo, k_hi), (v_lo, v_hi) = _JUNK_LOG10.get(dtype, _JUNK_LOG10["default"])
    for b, n in enumerate(seq_lens):
        junk = (Hkv, S - n + 1, D)  # rows n-1 (the new token's) .. S-1
        k[b, :, n - 1 :] = signs(junk, g) * 10.0 ** uniform(junk, g, k_lo, k_hi)
        v[b, :, n - 1 :] = signs(junk, g) * 10.0 ** uniform((), g, v_lo, v_hi)

    cos, sin = rope_table(D, ROPE_THETA, S, g.device)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=g.device)
    return {
        "h": h.to(dtype),
        "input_norm": input_norm.to(dtype),
        "qkv_proj": qkv_proj.to(dtype),
        "qkv_bias": qkv_bias.to(dtype) if p.get("qkv_bias") else None,
        "q_norm": q_norm.to(dtype) if qk_norms else None,
        "k_norm": k_norm.to(dtype) if qk_norms else None,
        "o_proj": o_proj.to(dtype),
        "post_attn_norm": post_attn_norm.to(dtype),
        "gate_up_proj": gate_up_proj.to(dtype),
        "down_proj": down_proj.to(dtype),
        "cos": cos,
        "sin": sin,
        "positions": lens - 1,
        "k_cache": k.to(dtype),
        "v_cache": v.to(dtype),
        "seq_lens": lens,
        "scale": float(D) ** -0.5,
        "eps": EPS,
        "max_len": S,
    }


def perturb(inputs: Inputs, seed: int) -> None:
    """A new residual stream h in place (same storage, any device); weights, cache and
    lengths stay, so a result cached across calls goes stale (and so do the K/V rows it
    would write: they depend on h)."""
    h = inputs["h"]
    g = generator(seed, "decode_layer", "perturb", device=h.device)
    h.copy_(randn(tuple(h.shape), g).to(h.dtype))
