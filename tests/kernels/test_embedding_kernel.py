"""Embedding gather kernel vs the torch reference: odd widths, id shapes, both id dtypes, and
ids outside the vocabulary (a zero row, no out-of-bounds read)."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DTYPES

from evokernel.ops import embedding, reference


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab,hidden,shape", [(37, 100, (5,)), (1000, 64, (2, 3)), (9, 1, (1,))])
def test_embed_matches_reference(
    vocab: int, hidden: int, shape: tuple[int, ...], dtype: torch.dtype, device
) -> None:
    g = torch.Generator().manual_seed(vocab + hidden)
    weight = torch.randn(vocab, hidden, generator=g).to(device, dtype)
    for id_dtype in (torch.int64, torch.int32):
        ids = torch.randint(0, vocab, shape, generator=g).to(device, id_dtype)
        out = embedding.embed(weight, ids)
        assert torch.equal(out, reference.embed(weight, ids.long())), id_dtype


def test_embed_out_of_range_ids_give_zero_rows(device) -> None:
    weight = torch.randn(6, 40).to(device, torch.float16)
    ids = torch.tensor([0, -1, 6, 5, 1 << 40], device=device)
    out = embedding.embed(weight, ids)
    assert torch.equal(out[[0, 3]], weight[[0, 5]])
    assert not out[[1, 2, 4]].any()


def test_embed_of_no_ids_is_empty(device) -> None:
    weight = torch.randn(6, 40).to(device, torch.float16)
    out = embedding.embed(weight, torch.zeros(0, 3, dtype=torch.int64, device=device))
    assert out.shape == (0, 3, 40)
