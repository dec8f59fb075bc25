"""verify's independent path: a quantized checkpoint dequantized straight from its published
tensors (model/quant/reference.py) equals what the writer meant, and transformers loads it."""

from __future__ import annotations

import pytest
import torch
from published import write_awq, write_fp8, write_gptq
from safetensors.torch import load_file

from evokernel.model.quant.reference import dense_copy

WRITERS = {
    "gptq4-act-asym": lambda s, d: write_gptq(s, d, 4, 32, sym=False, desc_act=True),
    "gptq8-g-1": lambda s, d: write_gptq(s, d, 8, -1),
    "awq": lambda s, d: write_awq(s, d, 32),
    "fp8": lambda s, d: write_fp8(s, d, (32, 64)),
}


@pytest.mark.parametrize("kind", WRITERS)
def test_dense_copy_holds_the_writers_weights(tiny_dir, tmp_path, kind) -> None:
    ref = WRITERS[kind](tiny_dir, tmp_path / "q")
    with dense_copy(tmp_path / "q") as d:
        tensors = load_file(d / "model.safetensors")
        for prefix, want in ref.items():
            assert torch.equal(tensors[f"{prefix}.weight"], want), prefix
        assert "quantization_config" not in (d / "config.json").read_text()
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        got = model.state_dict()["model.layers.0.mlp.down_proj.weight"]
        assert torch.equal(got, ref["model.layers.0.mlp.down_proj"])
