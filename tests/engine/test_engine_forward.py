"""Prefill and decode agree with each other: incremental decode reproduces a prefill, a batch
reproduces its sequences run alone, and K/V land at the positions they belong to."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evokernel.engine.decoder import DecoderModel
from evokernel.engine.loading import load_engine

PROMPT = [17, 300, 5, 99, 258, 42, 7, 511, 64]


def _prefill(model: DecoderModel, prompts: list[list[int]], S: int):
    B, T = len(prompts), max(map(len, prompts))
    ids = torch.zeros(B, T, dtype=torch.int64)
    for b, p in enumerate(prompts):
        ids[b, : len(p)] = torch.tensor(p)
    cache = model.new_cache(B, S)
    logits = model.prefill(ids, torch.tensor([len(p) for p in prompts]), cache)
    return logits, cache


def _decode(model, cache, tokens, positions):
    pos = torch.tensor(positions, dtype=torch.int32)
    return model.decode(torch.tensor(tokens), pos, pos + 1, cache)


def _close(a: torch.Tensor, b: torch.Tensor, what: str, atol: float = 2e-5) -> None:
    err = (a.double() - b.double()).abs()
    assert err.max() <= atol, f"{what}: max err {err.max():.3e}, mean err {err.mean():.3e}"


INTERPRETER_ONLY = "Triton kernels on CPU tensors need the interpreter (CPU-only machines)"


@pytest.fixture(
    scope="module",
    params=[
        "torch",
        pytest.param(
            "triton",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason=INTERPRETER_ONLY),
        ),
    ],
)
def model(request: pytest.FixtureRequest, tiny_fp32: Path) -> DecoderModel:
    return load_engine(tiny_fp32, "cpu", torch.float32, request.param)


def test_incremental_decode_reproduces_prefill(model: DecoderModel) -> None:
    T, S = len(PROMPT), 16
    with torch.inference_mode():
        full_logits, full_cache = _prefill(model, [PROMPT], S)
        logits, cache = _prefill(model, [PROMPT[:1]], S)
        for t in range(1, T):
            logits = _decode(model, cache, [PROMPT[t]], [t])
    _close(logits, full_logits, "last logits")
    for i in range(model.cfg.num_hidden_layers):
        _close(cache.k[i][:, :, :T], full_cache.k[i][:, :, :T], f"layer {i} K")
        _close(cache.v[i][:, :, :T], full_cache.v[i][:, :, :T], f"layer {i} V")


def test_batch_equals_each_sequence_alone(model: DecoderModel) -> None:
    prompts = [PROMPT[:5], PROMPT, PROMPT[3:5]]
    steps = [[3, 8, 100], [1, 2, 3], [511, 0, 9]]  # tokens fed at each decode step
    S = 16
    with torch.inference_mode():
        batch_logits, batch_cache = _prefill(model, prompts, S)
        batch_steps = []
        for i, toks in enumerate(steps):
            pos = [len(p) + i for p in prompts]
            batch_steps.append(_decode(model, batch_cache, toks, pos))
        for b, p in enumerate(prompts):
            logits, cache = _prefill(model, [p], S)
            _close(batch_logits[b], logits[0], f"sequence {b} prefill logits")
            for i, toks in enumerate(steps):
                logits = _decode(model, cache, [toks[b]], [len(p) + i])
                _close(batch_steps[i][b], logits[0], f"sequence {b} step {i} logits")
            n = len(p) + len(steps)  # valid positions; the rest of a batch row is junk/zero
            for layer in range(model.cfg.num_hidden_layers):
                _close(batch_cache.k[layer][b, :, :n], cache.k[layer][0, :, :n], f"K {b}")
                _close(batch_cache.v[layer][b, :, :n], cache.v[layer][0, :, :n], f"V {b}")


def test_cache_positions_written(tiny_fp32: Path) -> None:
    model = load_engine(tiny_fp32, "cpu", torch.float32, "torch")
    S = 12
    with torch.inference_mode():
        _, cache = _prefill(model, [[1, 2, 3], [4, 5, 6, 7, 8]], S)  # padded to T = 5
        written = [(cache.k[0][b] != 0).any(dim=-1).any(dim=0) for b in range(2)]  # [S]
        assert written[0].tolist() == [p < 5 for p in range(S)]  # 3 real + 2 padding rows
        assert written[1].tolist() == [p < 5 for p in range(S)]
        _decode(model, cache, [9, 10], [3, 9])
        k0 = [(cache.k[0][b] != 0).any(dim=-1).any(dim=0) for b in range(2)]
        assert k0[0].tolist() == [p < 5 for p in range(S)]
        assert k0[1].tolist() == [p < 5 or p == 9 for p in range(S)]
        # Sequence 0's position 3 now holds token 9's K: the same as a lone run writes.
        _, alone = _prefill(model, [[1, 2, 3]], S)
        _decode(model, alone, [9], [3])
        _close(cache.k[0][0, :, :4], alone.k[0][0, :, :4], "K after decode")
