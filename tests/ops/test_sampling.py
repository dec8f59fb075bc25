"""Sampling: greedy, top-k/top-p masks, seeded reproducibility, and the right distribution."""

from __future__ import annotations

import math

import pytest
import torch

from evokernel.errors import ConfigError
from evokernel.ops.sampling import GREEDY, SamplingParams, mask_logits, sample


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_greedy_is_argmax_with_ties_to_the_lowest_id() -> None:
    logits = torch.tensor([[0.0, 3.0, 3.0, 1.0], [5.0, -1.0, 2.0, 5.0]])
    assert sample(logits, GREEDY, None).tolist() == [1, 0]
    assert SamplingParams(temperature=0.7, top_k=1).greedy


def test_params_are_validated() -> None:
    for bad in ({"temperature": -1.0}, {"top_k": -2}, {"top_p": 0.0}, {"top_p": 1.5}):
        with pytest.raises(ConfigError):
            SamplingParams(**bad)


def test_top_k_keeps_the_k_largest() -> None:
    logits = torch.randn(5, 50, generator=_gen(0))
    masked = mask_logits(logits, top_k=7, top_p=1.0)
    keep = torch.isfinite(masked)
    assert keep.sum(dim=-1).tolist() == [7] * 5
    top = torch.topk(logits, 7, dim=-1).indices
    assert bool(keep.gather(-1, top).all())
    assert torch.equal(masked[keep], logits[keep])


@pytest.mark.parametrize(
    "top_p,kept",
    [(0.5, [0]), (0.7, [0, 1]), (0.79, [0, 1]), (0.81, [0, 1, 2]), (1.0, [0, 1, 2, 3])],
)
def test_top_p_keeps_the_smallest_nucleus(top_p: float, kept: list[int]) -> None:
    probs = torch.tensor([[0.3, 0.5, 0.15, 0.05]])  # ranked: ids 1, 0, 2, 3
    order = [1, 0, 2, 3]
    masked = mask_logits(probs.log(), top_k=0, top_p=top_p)
    want = sorted(order[i] for i in kept)
    assert torch.isfinite(masked[0]).nonzero().flatten().tolist() == want


def test_same_seed_same_tokens_other_seed_differs() -> None:
    logits = torch.randn(64, 100, generator=_gen(1)) * 2  # far from flat
    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.95)
    a = sample(logits, params, _gen(7))
    assert torch.equal(a, sample(logits, params, _gen(7)))
    assert not torch.equal(a, sample(logits, params, _gen(8)))


def test_samples_follow_the_distribution() -> None:
    p = torch.tensor([0.6, 0.25, 0.1, 0.05])
    n = 20000
    tokens = sample(p.log().expand(n, 4), SamplingParams(temperature=1.0), _gen(3))
    freq = torch.bincount(tokens, minlength=4).double() / n
    assert (freq - p.double()).abs().max() < 0.015, freq.tolist()
    # Temperature 0.5 squares the odds: p^2 / sum(p^2).
    sharp = p.double() ** 2 / (p.double() ** 2).sum()
    tokens = sample(p.log().expand(n, 4), SamplingParams(temperature=0.5), _gen(4))
    freq = torch.bincount(tokens, minlength=4).double() / n
    assert (freq - sharp).abs().max() < 0.015, freq.tolist()
    # Masked tokens are never drawn.
    tokens = sample(p.log().expand(n, 4), SamplingParams(temperature=1.0, top_k=2), _gen(5))
    assert set(tokens.tolist()) == {0, 1}
    assert math.isclose(float((tokens == 0).double().mean()), 0.6 / 0.85, abs_tol=0.015)
