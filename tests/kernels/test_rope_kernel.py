"""Fused q/k-norm + RoPE + cache-append kernel vs the torch reference.

Checks q, every cache row written at its position, and that nothing else in the caches
changed (they start filled with a sentinel).
"""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DTYPES, assert_close

from evokernel.ops import reference, rope

SENTINEL = 7.0
CASES = [
    # B, T, Hq, Hkv, D, S
    (1, 1, 16, 8, 128, 40),
    (3, 5, 6, 2, 64, 23),
    (2, 3, 8, 8, 64, 16),
    (1, 7, 5, 1, 128, 9),
]


def _inputs(B, T, hq, hkv, D, S, dtype, seed, device):
    g = torch.Generator().manual_seed(seed)
    qkv = (torch.randn(B, T, (hq + 2 * hkv) * D, generator=g) * 2).to(device, dtype)
    q_norm = (1.6 + 0.2 * torch.randn(D, generator=g)).to(device, dtype)
    k_norm = (1.6 + 0.2 * torch.randn(D, generator=g)).to(device, dtype)
    cos, sin = rope.rope_table(D, 1_000_000.0, S, device)
    # Distinct irregular positions per sequence.
    positions = torch.stack([torch.randperm(S, generator=g)[:T] for _ in range(B)]).int()
    positions = positions.to(device)
    k_cache = torch.full((B, hkv, S, D), SENTINEL, dtype=dtype, device=device)
    return qkv, q_norm, k_norm, cos, sin, positions, k_cache, k_cache.clone()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,T,hq,hkv,D,S", CASES)
def test_qk_norm_rope_append_matches_reference(B, T, hq, hkv, D, S, dtype, device) -> None:
    args = _inputs(B, T, hq, hkv, D, S, dtype, seed=B * 100 + T * 10 + hq, device=device)
    qkv, qn, kn, cos, sin, pos, kc, vc = args
    ref_kc, ref_vc = kc.clone(), vc.clone()
    q = rope.qk_norm_rope_append(qkv, qn, kn, cos, sin, pos, kc, vc, 1e-6)
    ref_q = reference.qk_norm_rope_append(qkv, qn, kn, cos, sin, pos, ref_kc, ref_vc, 1e-6)
    assert_close(q, ref_q, "q")
    assert_close(kc, ref_kc, "k_cache")
    assert_close(vc, ref_vc, "v_cache")
    written = torch.zeros(B, S, dtype=torch.bool, device=device)
    written[torch.arange(B, device=device).unsqueeze(1), pos.long()] = True
    untouched = ~written[:, None, :, None].expand_as(kc)
    assert bool((kc[untouched] == SENTINEL).all()) and bool((vc[untouched] == SENTINEL).all())
    # V is copied unchanged from the packed qkv.
    v = qkv.view(B, T, hq + 2 * hkv, D)[:, :, hq + hkv :]
    for b in range(B):
        for t in range(T):
            assert torch.equal(vc[b, :, pos[b, t]], v[b, t])


def test_position_outside_the_cache_writes_nothing(device: str) -> None:
    qkv, qn, kn, cos, sin, _, kc, vc = _inputs(1, 2, 4, 2, 64, 8, torch.float32, 3, device)
    pos = torch.tensor([[8, 3]], dtype=torch.int32, device=device)  # 8 == S: out of range
    q = rope.qk_norm_rope_append(qkv, qn, kn, cos, sin, pos, kc, vc, 1e-6)
    assert q.shape == (1, 2, 4, 64)
    changed = (kc != SENTINEL).any(dim=-1).any(dim=1)[0]  # [S]
    assert changed.tolist() == [i == 3 for i in range(8)]


def test_rope_table_matches_transformers_formula() -> None:
    D, theta = 64, 10000.0
    cos, sin = rope.rope_table(D, theta, 50, "cpu")
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    freqs = torch.arange(50).float()[:, None] @ inv_freq[None, :]
    assert torch.equal(cos, freqs.cos()) and torch.equal(sin, freqs.sin())
