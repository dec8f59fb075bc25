"""The torch reference ops against naive per-sequence, per-head formulas in float64."""

from __future__ import annotations

import math

import torch

from evokernel.ops import reference


def _naive_attention(q, k, v, scale, causal_from=None):
    """q [Tq, D], k/v [Tk, D] float64; causal_from: position of q's first row, or None."""
    scores = q @ k.T * scale
    if causal_from is not None:
        qpos = torch.arange(q.shape[0]).unsqueeze(1) + causal_from
        scores = scores.masked_fill(torch.arange(k.shape[0]).unsqueeze(0) > qpos, -math.inf)
    return torch.softmax(scores, dim=-1) @ v


def test_decode_attention_reads_only_valid_positions() -> None:
    g = torch.Generator().manual_seed(0)
    B, hq, hkv, S, D = 3, 6, 2, 19, 64
    q = torch.randn(B, hq, D, generator=g)
    k = torch.randn(B, hkv, S, D, generator=g)
    v = torch.randn(B, hkv, S, D, generator=g)
    seq_lens = torch.tensor([1, 19, 7], dtype=torch.int32)
    for b, n in enumerate(seq_lens.tolist()):  # junk, even NaN, past each length
        k[b, :, n:] = float("nan")
        v[b, :, n:] = float("nan")
    out = reference.decode_attention(q, k, v, seq_lens, D**-0.5)
    for b, n in enumerate(seq_lens.tolist()):
        for h in range(hq):
            j = h // (hq // hkv)
            want = _naive_attention(
                q[b, h : h + 1].double(), k[b, j, :n].double(), v[b, j, :n].double(), D**-0.5
            )
            err = (out[b, h].double() - want[0]).abs().max().item()
            assert err < 1e-5, f"b={b} h={h}: max err {err:.3e}"


def test_prefill_attention_is_causal_over_cache_prefix() -> None:
    g = torch.Generator().manual_seed(1)
    B, T, hq, hkv, S, D = 2, 5, 4, 2, 9, 32
    q = torch.randn(B, T, hq, D, generator=g)
    k = torch.randn(B, hkv, S, D, generator=g)
    v = torch.randn(B, hkv, S, D, generator=g)
    out = reference.prefill_attention(q, k, v, D**-0.5)
    assert out.shape == (B, T, hq, D)
    for b in range(B):
        for h in range(hq):
            j = h // (hq // hkv)
            want = _naive_attention(
                q[b, :, h].double(), k[b, j, :T].double(), v[b, j, :T].double(), D**-0.5, 0
            )
            err = (out[b, :, h].double() - want).abs().max().item()
            assert err < 1e-5, f"b={b} h={h}: max err {err:.3e}"


def test_residual_add_and_silu_mul_formulas() -> None:
    g = torch.Generator().manual_seed(2)
    x, r, w = torch.randn(3, 10, generator=g), torch.randn(3, 10, generator=g), torch.rand(10)
    total, normed = reference.residual_add(x, r, w, 1e-6)
    h = (x + r).double()
    want = w.double() * h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert torch.allclose(total.double(), h) and torch.allclose(normed.double(), want, atol=1e-6)
    gu = torch.randn(2, 8, generator=g)
    want_act = torch.nn.functional.silu(gu[:, :4]) * gu[:, 4:]
    assert torch.allclose(reference.silu_mul(gu), want_act)
    assert reference.logits(torch.randn(2, 4), torch.randn(7, 4)).dtype == torch.float32
