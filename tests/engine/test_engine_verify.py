"""The engine matches transformers' Qwen3 in float32 on the CPU (KL mean < 1e-5), with torch
ops and with our Triton kernels under the interpreter; a broken op fails verification."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evokernel.engine.loading import load_engine
from evokernel.engine.verify import _judge, compare, default_prompt, load_reference, verify
from evokernel.model.random import write_random_checkpoint
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


def test_judge_rules() -> None:
    bf16, fp32 = torch.bfloat16, torch.float32
    assert _judge(True, 5e-4, 1e-3, bf16, None, None) == ("kl_mean", "")
    assert _judge(True, 5e-3, 1e-3, bf16, 9e-3, 6e-3) == ("fp32_precision", "")
    crit, reason = _judge(True, 5e-3, 1e-3, bf16, 2e-2, 6e-3)
    assert crit == "" and "KL vs float32" in reason
    assert _judge(True, 5e-3, 1e-3, bf16, None, None)[0] == ""  # no float32 run: KL only
    assert _judge(True, 2e-5, 1e-5, fp32, 1e-9, 1e-9)[0] == ""  # float32: KL only
    assert _judge(False, 0.0, 1e-3, bf16, 0.0, 1.0) == ("", "the engine produced non-finite logits")


def test_bf16_on_cpu_passes_by_precision_and_catches_a_bug(tmp_path: Path) -> None:
    """bfloat16 (torch ops; the interpreter cannot run bf16 kernels) on a 4-layer model."""
    ckpt = write_random_checkpoint(
        tmp_path, "tiny", seed=0, dtype="bfloat16", layers=4, hidden=128, intermediate=384
    )
    hf = load_reference(ckpt, "cpu", torch.bfloat16)
    hf32 = load_reference(ckpt, "cpu", torch.float32)
    prompt = default_prompt(512)
    good = compare(load_engine(ckpt, "cpu", torch.bfloat16, "torch"), hf, prompt, 12, hf_fp32=hf32)
    assert good.passed, good.reason
    assert good.fp32_kl_mean is not None and good.fp32_kl_mean_ref is not None
    ops = OpSet.torch().replace(decode_attention=(_off_by_one_attention, "broken"))
    bad = compare(load_engine(ckpt, "cpu", torch.bfloat16, ops), hf, prompt, 12, hf_fp32=hf32)
    assert not bad.passed and "KL vs float32" in bad.reason
