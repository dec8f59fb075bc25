"""The gpt-fast-style baseline is numerically the checkpoint's model: transformers' logits and
greedy tokens in float32, through its eager path and through its compiled decode step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evokernel.bench.systems.gptfast import GptFastSystem
from evokernel.bench.systems.gptfast_model import KVCache, Transformer, decode_one_token
from evokernel.bench.systems.hf import load_hf
from evokernel.model.loader import load_model

PROMPT = [5, 300, 17, 42, 258, 99, 7, 400, 256]
STEPS = 6


def _hf_greedy(model_dir: Path) -> tuple[torch.Tensor, list[int]]:
    """transformers (SDPA, DynamicCache): logits [1 + STEPS, V] and the greedy tokens."""
    hf = load_hf(model_dir, "cpu", torch.float32)
    logits, tokens = [], []
    with torch.inference_mode():
        out = hf(input_ids=torch.tensor([PROMPT]), use_cache=True)
        for _ in range(STEPS + 1):
            logits.append(out.logits[0, -1].double())
            tokens.append(int(out.logits[0, -1].argmax()))
            out = hf(
                input_ids=torch.tensor([[tokens[-1]]]),
                past_key_values=out.past_key_values,
                use_cache=True,
            )
    return torch.stack(logits), tokens


def _ours(model_dir: Path, cache_len: int) -> tuple[torch.Tensor, list[int]]:
    cfg, weights = load_model(model_dir, "cpu", torch.float32)
    model = Transformer.from_weights(cfg, weights)
    cache = KVCache.allocate(cfg, cache_len, torch.device("cpu"), torch.float32)
    logits, tokens = [], []
    with torch.no_grad():
        out = model(torch.tensor([PROMPT]), torch.arange(len(PROMPT)), cache)  # [1, V]
        for i in range(STEPS + 1):
            logits.append(out[0].double())
            tokens.append(int(out[0].argmax()))
            pos = torch.tensor([len(PROMPT) + i])
            out = model(torch.tensor([[tokens[-1]]]), pos, cache)
    return torch.stack(logits), tokens


@pytest.mark.parametrize("fixture", ["tiny_ckpt", "gqa3_untied"])
def test_logits_and_greedy_tokens_match_transformers(fixture: str, request) -> None:
    model_dir = request.getfixturevalue(fixture)
    ref_logits, ref_tokens = _hf_greedy(model_dir)
    logits, tokens = _ours(model_dir, cache_len=64)
    err = (logits - ref_logits).abs().max().item()
    scale = ref_logits.abs().max().item()
    assert err <= 1e-5 * scale, f"max |diff| {err:.3e} (logits up to {scale:.2f})"
    assert tokens == ref_tokens


def test_decode_ignores_cache_beyond_the_position(tiny_ckpt: Path) -> None:
    # A longer cache holding junk past the position gives the same step as a fresh one.
    _, tokens = _ours(tiny_ckpt, cache_len=64)
    cfg, weights = load_model(tiny_ckpt, "cpu", torch.float32)
    model = Transformer.from_weights(cfg, weights)
    cache = KVCache.allocate(cfg, 256, torch.device("cpu"), torch.float32)
    for t in cache.tensors():
        t.normal_()
    with torch.no_grad():
        first = model(torch.tensor([PROMPT]), torch.arange(len(PROMPT)), cache).argmax(-1)
        step = decode_one_token(model, first.view(1, 1), torch.tensor([len(PROMPT)]), cache)
    assert [int(first), int(step)] == tokens[:2]


def test_compiled_step_follows_the_eager_tokens_over_cache_lengths(tiny_ckpt: Path) -> None:
    # The benchmark's session, compiled step (Dynamo, eager backend on the CPU), at three
    # cache lengths: the same greedy tokens as the eager model, and one graph for all.
    _, tokens = _ours(tiny_ckpt, cache_len=64)
    system = GptFastSystem(tiny_ckpt, "cpu", torch.float32)
    try:
        for need in (20, 200, 300):
            with system.context():
                session = system.open(PROMPT, need)
                session.prefill()
                session.rewind()
                got = [int(session.first)]
                for _ in range(STEPS):
                    session.step()
                    got.append(int(session.token))
                session.close()
            assert got == tokens
        assert system.setup()["graphs_compiled"] == 1
    finally:
        system.close()
