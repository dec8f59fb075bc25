"""On CUDA: the captured decode graph computes what eager decode computes, and bfloat16
verification against transformers passes on Qwen3-0.6B's layer shapes (2 layers)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evokernel.engine.generate import GenerateOptions, generate
from evokernel.engine.loading import load_engine
from evokernel.engine.verify import engine_forced, verify
from evokernel.model.random import write_random_checkpoint

pytestmark = pytest.mark.gpu

PROMPT = [151643, 9707, 11, 1879, 0, 42, 2048, 77, 13, 5]


@pytest.fixture(scope="module")
def small_bf16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3-0.6B's exact shapes (vocab 151936, 16:8 heads, head_dim 128) with 2 layers."""
    return write_random_checkpoint(
        tmp_path_factory.mktemp("small"), "qwen3-0.6b", seed=5, dtype="bfloat16", layers=2
    )


@pytest.mark.parametrize("ops", ["torch", "triton"])
def test_graph_decode_equals_eager_decode(small_bf16: Path, ops: str) -> None:
    model = load_engine(small_bf16, "cuda", torch.bfloat16, ops)
    opts = GenerateOptions(max_new_tokens=24)
    graphed = generate(model, [PROMPT], opts)
    eager = generate(model, [PROMPT], GenerateOptions(max_new_tokens=24, use_graph=False))
    assert graphed.cuda_graph and not eager.cuda_graph
    assert graphed.tokens == eager.tokens
    tokens = graphed.tokens[0]
    with_graph, used = engine_forced(model, PROMPT, tokens, use_graph=True)
    without, _ = engine_forced(model, PROMPT, tokens, use_graph=False)
    assert used
    err = (with_graph - without).abs()
    assert err.max() <= 1e-2, f"max err {err.max():.3e}, mean err {err.mean():.3e}"


def test_graph_batch_decode_equals_eager(small_bf16: Path) -> None:
    model = load_engine(small_bf16, "cuda", torch.bfloat16, "triton")
    prompts = [PROMPT, PROMPT[:3], PROMPT[2:9]]
    graphed = generate(model, prompts, GenerateOptions(max_new_tokens=12))
    eager = generate(model, prompts, GenerateOptions(max_new_tokens=12, use_graph=False))
    assert graphed.tokens == eager.tokens


def test_seeded_sampling_on_cuda_is_reproducible(small_bf16: Path) -> None:
    from evokernel.engine.sampling import SamplingParams

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
