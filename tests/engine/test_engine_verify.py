"""The engine matches transformers' Qwen3 in float32 on the CPU (KL mean < 1e-5), with torch
ops and with our Triton kernels under the interpreter; a broken op fails verification."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evokernel.engine.loading import load_engine
from evokernel.engine.verify import compare, default_prompt, load_reference, verify
from evokernel.ops import reference
from evokernel.ops.registry import OpSet

INTERPRETER_ONLY = "Triton kernels on CPU tensors need the interpreter (CPU-only machines)"


def test_torch_ops_match_transformers(tiny_fp32: Path) -> None:
    result = verify(tiny_fp32, device="cpu", ops="torch", steps=12)
    assert result.passed, result.reason
    assert result.kl_mean < 1e-9 and result.argmax_agreement == 1.0
    assert result.threshold == 1e-5 and result.dtype == "float32" and result.device == "cpu"
    assert len(result.kl_per_step) == 12 and not result.cuda_graph


@pytest.mark.skipif(torch.cuda.is_available(), reason=INTERPRETER_ONLY)
def test_triton_ops_match_transformers(tiny_fp32: Path) -> None:
    result = verify(tiny_fp32, device="cpu", ops="triton", steps=6, prompt=[5, 300, 7, 258, 1])
    assert result.passed, result.reason
    assert result.kl_mean < 1e-8 and result.argmax_agreement == 1.0
    assert result.ops["qk_norm_rope_append"] == "triton"


def test_untied_lm_head_and_other_gqa_ratio(tiny_gqa3_untied: Path) -> None:
    result = verify(tiny_gqa3_untied, device="cpu", ops="torch", steps=8)
    assert result.passed, result.reason
    assert result.argmax_agreement == 1.0


def _off_by_one_attention(q, k_cache, v_cache, seq_lens, scale):
    return reference.decode_attention(q, k_cache, v_cache, (seq_lens - 1).clamp(min=1), scale)


def test_a_broken_decode_op_fails(tiny_fp32: Path) -> None:
    ops = OpSet.torch().replace(decode_attention=(_off_by_one_attention, "broken"))
    model = load_engine(tiny_fp32, "cpu", torch.float32, ops)
    hf = load_reference(tiny_fp32, "cpu", torch.float32)
    result = compare(model, hf, default_prompt(model.cfg.vocab_size), steps=6)
    assert not result.passed
    assert result.kl_mean > 1e-3
    assert result.reason.startswith("KL mean") and "\n" not in result.reason
    assert result.kl_per_step[0] < 1e-9  # the first step comes from prefill, which is intact
