"""On CUDA: the captured decode graph computes what eager decode computes, and bfloat16
verification against transformers passes on Qwen3-0.6B's layer shapes (2 layers)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evokernel.engine.generate import GenerateOptions, generate
from evokernel.engine.graph import DecodeRunner
from evokernel.engine.loading import load_engine
from evokernel.engine.verify import engine_forced, kl_and_agreement, verify
from evokernel.model.random import write_random_checkpoint

pytestmark = pytest.mark.gpu

PROMPT = [151643, 9707, 11, 1879, 0, 42, 2048, 77, 13, 5]


@pytest.fixture(scope="module")
def small_bf16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3-0.6B's exact shapes (vocab 151936, 16:8 heads, head_dim 128) with 2 layers."""
    return write_random_checkpoint(
        tmp_path_factory.mktemp("small"), "qwen3-0.6b", seed=5, dtype="bfloat16", layers=2
    )


def _forced_batch(model, prompts, feeds, use_graph: bool) -> torch.Tensor:
    """Prefill `prompts`, then decode feeding feeds[i] (one token per sequence) at step i
    -> logits [steps, B, V] float64 on the CPU."""
    B, T = len(prompts), max(map(len, prompts))
    lens = torch.tensor([len(p) for p in prompts], device="cuda")
    ids = torch.zeros(B, T, dtype=torch.int64)
    for b, p in enumerate(prompts):
        ids[b, : len(p)] = torch.tensor(p)
    out = []
    with torch.inference_mode():
        cache = model.new_cache(B, T + len(feeds) + 1)
        runner = DecodeRunner(model, cache, use_graph=use_graph, greedy=False)
        model.prefill(ids.cuda(), lens, cache)
        runner.start(torch.tensor(feeds[0], device="cuda"), lens.int())
        for i in range(len(feeds)):
            logits = runner.step()
            assert logits is not None
            out.append(logits.to("cpu", torch.float64))
            if i + 1 < len(feeds):
                runner.feed(torch.tensor(feeds[i + 1], device="cuda"))
    assert runner.uses_graph == use_graph
    return torch.stack(out)


def _assert_same_logits(a: torch.Tensor, b: torch.Tensor) -> None:
    """Bit-identical is expected (same kernels, same inputs); allow rounding-level drift."""
    kl, agree = kl_and_agreement(a.flatten(0, -2), b.flatten(0, -2))
    diff = (a - b).abs()
    assert kl.max() < 1e-4 and bool(agree.all()), (
        f"graph vs eager: KL max {kl.max():.3e}, logits max diff {diff.max():.3e}, "
        f"mean diff {diff.mean():.3e}, argmax agreement {agree.double().mean():.3f}"
    )


@pytest.mark.parametrize("ops", ["torch", "triton"])
def test_graph_decode_equals_eager_decode(small_bf16: Path, ops: str) -> None:
    model = load_engine(small_bf16, "cuda", torch.bfloat16, ops)
    graphed = generate(model, [PROMPT], GenerateOptions(max_new_tokens=24))
    eager = generate(model, [PROMPT], GenerateOptions(max_new_tokens=24, use_graph=False))
    assert graphed.cuda_graph and not eager.cuda_graph
    tokens = graphed.tokens[0]
    with_graph, used = engine_forced(model, PROMPT, tokens, use_graph=True)
    without, _ = engine_forced(model, PROMPT, tokens, use_graph=False)
    assert used
    _assert_same_logits(with_graph, without)
    if torch.equal(with_graph, without):
        assert graphed.tokens == eager.tokens


def test_graph_batch_decode_equals_eager(small_bf16: Path) -> None:
    model = load_engine(small_bf16, "cuda", torch.bfloat16, "triton")
    prompts = [PROMPT, PROMPT[:3], PROMPT[2:9]]
    feeds = [[11 * i + b for b in range(3)] for i in range(1, 10)]
    graphed = _forced_batch(model, prompts, feeds, use_graph=True)
    eager = _forced_batch(model, prompts, feeds, use_graph=False)
    _assert_same_logits(graphed, eager)


def test_seeded_sampling_on_cuda_is_reproducible(small_bf16: Path) -> None:
    from evokernel.ops.sampling import SamplingParams

    model = load_engine(small_bf16, "cuda", torch.bfloat16, "triton")
    params = SamplingParams(temperature=1.0, top_k=50, top_p=0.9)
    runs = [
        generate(model, [PROMPT], GenerateOptions(max_new_tokens=16, sampling=params, seed=s))
        for s in (0, 0, 1)
    ]
    assert runs[0].tokens == runs[1].tokens != runs[2].tokens


@pytest.mark.parametrize("ops", ["torch", "triton"])
def test_bf16_verify_passes(small_bf16: Path, ops: str) -> None:
    result = verify(small_bf16, device="cuda", ops=ops, steps=16, fp32_reference=True)
    assert result.passed, result.reason
    assert result.dtype == "bfloat16" and result.threshold == 1e-3 and result.cuda_graph
    assert result.fp32_kl_mean is not None and result.fp32_kl_mean_ref is not None
    assert result.argmax_agreement >= 0.8
