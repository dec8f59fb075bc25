"""Quantized checkpoints through the engine end to end on the CPU: `quantize` then `verify`
(against transformers on the same weights dequantized independently, tight float32
threshold) and `verify --reference` (the original's KL, informational); generate; the same
for checkpoints of the independent writer. The fused decode ops run the quantized Triton
kernels under the interpreter (the engine's op set dispatches on the weight type)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from published import write_awq, write_fp8, write_gptq

from evokernel import device as devices
from evokernel.cli import main
from evokernel.engine.generate import GenerateOptions, generate
from evokernel.engine.loading import load_engine
from evokernel.engine.verify import verify
from evokernel.model.quant.write import QuantizeOptions, write_quantized
from evokernel.model.random import write_random_checkpoint
from evokernel.ops.registry import OpSet

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="Triton kernels on CPU tensors need the interpreter"
)
PROMPT = [5, 300, 7, 258, 1, 77]


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random_checkpoint(
        tmp_path_factory.mktemp("src"), "tiny", seed=4, dtype="float32", untied=True
    )


def _ops() -> OpSet:
    devices.prepare("cpu")
    return OpSet.triton(pdl=False)


QUANTIZED = {
    "fp8": QuantizeOptions("fp8"),
    "fp8-head": QuantizeOptions("fp8", head="fp8"),
    "int8": QuantizeOptions("int8", group_size=-1),
    "int4-head8-asym": QuantizeOptions("int4", head="int8", group_size=32, sym=False),
    "int4-awq": QuantizeOptions("int4", layout="awq", group_size=32),
    "int4-head4": QuantizeOptions("int4", head="int4", group_size=32),
    "int8-head4": QuantizeOptions("int8", head="int4", group_size=32),
}


@pytest.mark.parametrize("name", QUANTIZED)
def test_quantize_then_verify_against_transformers(src, tmp_path, name) -> None:
    out = tmp_path / name
    write_quantized(src, out, QUANTIZED[name])
    result = verify(out, device="cpu", ops=_ops(), steps=4, prompt=PROMPT, reference=src)
    assert result.passed, result.reason
    assert result.kl_mean < 1e-8 and result.argmax_agreement == 1.0
    method = QUANTIZED[name].resolved_layout
    assert result.quantization is not None and result.quantization.startswith(method)
    # the quantization's own error: positive, and small for a random model
    assert result.original_kl_mean is not None and 0 < result.original_kl_mean < 0.5
    assert result.original_argmax_agreement is not None


WRITERS = {
    "gptq4-act": lambda s, d: write_gptq(s, d, 4, 32, sym=False, desc_act=True, head=True),
    "gptq8": lambda s, d: write_gptq(s, d, 8, -1),
    "awq": lambda s, d: write_awq(s, d, 32),
    "fp8": lambda s, d: write_fp8(s, d, head=True),
}


@pytest.mark.parametrize("name", WRITERS)
def test_published_checkpoints_verify(src, tmp_path, name) -> None:
    WRITERS[name](src, tmp_path / "q")
    result = verify(tmp_path / "q", device="cpu", ops=_ops(), steps=3, prompt=PROMPT[:3])
    assert result.passed, result.reason
    assert result.kl_mean < 1e-8


def test_generate_on_packed_weights_matches_the_dequantized_model(src, tmp_path) -> None:
    from evokernel.engine.quant_verify import reference_dir

    WRITERS["gptq4-act"](src, tmp_path / "q")
    model = load_engine(tmp_path / "q", "cpu", torch.float32, _ops())
    greedy = generate(model, [PROMPT, PROMPT[:2]], GenerateOptions(max_new_tokens=4))
    with reference_dir(tmp_path / "q") as ref:
        ref_model = load_engine(ref, "cpu", torch.float32, "torch")
        want = generate(ref_model, [PROMPT, PROMPT[:2]], GenerateOptions(max_new_tokens=4))
    assert greedy.tokens == want.tokens and len(greedy.tokens[0]) == 4


def test_quantize_cli_then_verify_cli_with_reference(src, tmp_path, capsys, monkeypatch) -> None:
    out = tmp_path / "q"
    assert main(["quantize", "--model", str(src), "--out", str(out), "--format", "int4",
                 "--head", "int8", "--group-size", "32"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "int4 as gptq" in text and "head int8" in text and "round to nearest" in text
    assert (out / "tokenizer.json").is_file() and (out / "generation_config.json").is_file()
    # the CLI's engine runs the quantized kernels through the same dispatch
    import evokernel.engine.loading as loading

    real = loading.load_engine
    monkeypatch.setattr(
        loading, "load_engine", lambda d, dev, dt, ops, **kw: real(d, dev, dt, _ops(), **kw)
    )
    import evokernel.engine.verify as verify_module

    monkeypatch.setattr(verify_module, "load_engine", loading.load_engine)
    code = main(["verify", "--model", str(out), "--device", "cpu", "--steps", "3",
                 "--prompt-ids", "5,300,7", "--reference", str(src)])  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0, text
    assert "quantized: gptq int4-g32, head int8-g32" in text
    assert "vs the original" in text and "informational" in text


def test_a_reference_of_another_architecture_is_refused(src, tmp_path) -> None:
    from evokernel.engine.quant_verify import check_original
    from evokernel.errors import ConfigError
    from evokernel.model.config import ModelConfig

    other = write_random_checkpoint(tmp_path / "o", "tiny", seed=0, dtype="float32", layers=3)
    cfg = ModelConfig.from_dir(src)
    check_original(cfg, src)  # its own architecture passes
    with pytest.raises(ConfigError, match="num_hidden_layers is 3, the checkpoint's is 2"):
        check_original(cfg, other)


@pytest.mark.parametrize("name", ["int4-head8-asym", "fp8-head", "int4-awq"])
def test_a_model_with_biases_quantizes_and_verifies(tmp_path, name) -> None:
    """Qwen2's q/k/v biases stay dense beside their quantized modules: `quantize` copies
    them (it used to look for them among the module's packed tensors and fail), and the
    verify reference keeps them (it used to drop them with the module's packed tensors)."""
    src = write_random_checkpoint(tmp_path / "src", "tiny-qwen2", seed=5, dtype="float32")
    out = tmp_path / name
    write_quantized(src, out, QUANTIZED[name])
    result = verify(out, device="cpu", ops=_ops(), steps=3, prompt=PROMPT[:4], reference=src)
    assert result.passed, result.reason
    assert result.kl_mean < 1e-8
