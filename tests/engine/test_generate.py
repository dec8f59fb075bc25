"""generate(): greedy equals transformers' greedy, EOS and length stops, seeded sampling,
batches, and input errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evokernel.engine.decoder import DecoderModel
from evokernel.engine.generate import GenerateOptions, generate
from evokernel.engine.loading import load_engine
from evokernel.engine.verify import load_reference, reference_greedy
from evokernel.errors import ConfigError
from evokernel.ops.sampling import SamplingParams

PROMPT = [256, 72, 101, 108, 108, 111]


@pytest.fixture(scope="module")
def model(tiny_fp32: Path) -> DecoderModel:
    return load_engine(tiny_fp32, "cpu", torch.float32, "torch")


def test_greedy_matches_transformers(model: DecoderModel, tiny_fp32: Path) -> None:
    result = generate(model, [PROMPT], GenerateOptions(max_new_tokens=10))
    ref_tokens, _ = reference_greedy(load_reference(tiny_fp32, "cpu", torch.float32), PROMPT, 10)
    assert result.tokens == [ref_tokens]
    assert result.stop_reasons == ["length"] and result.decode_steps == 9
    assert result.device == "cpu" and result.dtype == "float32" and not result.cuda_graph
    assert result.prefill_ms > 0 and result.decode_tok_s > 0


def test_stops_after_eos(model: DecoderModel) -> None:
    free = generate(model, [PROMPT], GenerateOptions(max_new_tokens=12)).tokens[0]
    eos = free[4]
    stop = free.index(eos)
    result = generate(model, [PROMPT], GenerateOptions(max_new_tokens=12, eos_token_ids=(eos,)))
    assert result.tokens == [free[: stop + 1]]
    assert result.stop_reasons == ["eos"]
    assert result.decode_steps == stop  # CPU checks every step: no step past the EOS


def test_seeded_sampling_is_reproducible(model: DecoderModel) -> None:
    def run(seed: int) -> list[int]:
        params = SamplingParams(temperature=1.0, top_k=50, top_p=0.95)
        opts = GenerateOptions(max_new_tokens=16, sampling=params, seed=seed)
        return generate(model, [PROMPT], opts).tokens[0]

    first = run(0)
    assert run(0) == first
    assert run(1) != first


def test_batch_generates_what_each_prompt_generates_alone(model: DecoderModel) -> None:
    prompts = [PROMPT, [9, 8], [300, 301, 302, 303]]
    opts = GenerateOptions(max_new_tokens=6)
    batch = generate(model, prompts, opts)
    assert batch.tokens == [generate(model, [p], opts).tokens[0] for p in prompts]
    assert batch.prompt_lens == [6, 2, 4]


def test_bad_inputs_are_config_errors(model: DecoderModel) -> None:
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        generate(model, [[1, 512]], GenerateOptions(max_new_tokens=2))
    with pytest.raises(ConfigError, match="at least one token"):
        generate(model, [[]], GenerateOptions(max_new_tokens=2))
    with pytest.raises(ConfigError, match="exceeds"):
        generate(model, [PROMPT], GenerateOptions(max_new_tokens=model.max_seq_len))
    with pytest.raises(ConfigError, match="max-new-tokens"):
        GenerateOptions(max_new_tokens=0)


def test_triton_greedy_step_matches_torch(tiny_fp32: Path) -> None:
    # The greedy step's fused head (argmax written on the device, positions advanced there).
    triton_model = load_engine(tiny_fp32, "cpu", torch.float32, "triton")
    opts = GenerateOptions(max_new_tokens=6)
    torch_model = load_engine(tiny_fp32, "cpu", torch.float32, "torch")
    assert (
        generate(triton_model, [PROMPT], opts).tokens
        == generate(torch_model, [PROMPT], opts).tokens
    )


def test_decode_across_context_buckets_matches_transformers(tiny_fp32: Path) -> None:
    # A 250-token prompt decoded past position 256, where attention's bound moves to the next
    # bucket: a bound that dropped valid positions would change the tokens.
    model = load_engine(tiny_fp32, "cpu", torch.float32, "torch")
    prompt = [(7 * i + 3) % 250 + 1 for i in range(250)]
    result = generate(model, [prompt], GenerateOptions(max_new_tokens=12))
    ref_tokens, _ = reference_greedy(load_reference(tiny_fp32, "cpu", torch.float32), prompt, 12)
    assert result.tokens == [ref_tokens]


def test_the_decode_runner_is_kept_across_calls(model: DecoderModel) -> None:
    from evokernel.engine.graph import runner_for

    first = generate(model, [PROMPT], GenerateOptions(max_new_tokens=5))
    runner = runner_for(model, 1, len(PROMPT) + 5, use_graph=False, greedy=True)
    again = generate(model, [PROMPT], GenerateOptions(max_new_tokens=5))
    assert runner_for(model, 1, len(PROMPT) + 5, use_graph=False, greedy=True) is runner
    assert again.tokens == first.tokens
