"""compressed-tensors checkpoints written by the compressed-tensors library itself, for the tests.

The publisher's own code does every step that decides the files: `apply_quantization_config`
attaches the scheme to transformers' model, `calculate_qparams` turns each weight group's (or
row's, block's, the tensor's) min and max into scales and zero points, `ModelCompressor`
packs the weights (`PackedQuantizationCompressor`: `pack_to_int32`; the float compressor for
FP8) and `update_config` writes `quantization_config`; transformers' `save_pretrained`
writes the safetensors. What each module stands for is the library's own `fake_quantize` of
its weight with those parameters (quantize, then dequantize), taken before compression.

    ref = write_compressed(src, dst, scheme)   # -> {HF module prefix: dense float32 [N, K]}

`scheme` is a `compressed_tensors.quantization.QuantizationScheme` keyword dict (weights and
input activations as `QuantizationArgs` keyword dicts), applied to every Linear but the head.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def write_compressed(
    src: Path, dst: Path, weights: dict[str, Any], activations: dict[str, Any] | None = None,
    fmt: str | None = "pack-quantized", ignore: tuple[str, ...] = ("lm_head",),
) -> dict[str, torch.Tensor]:  # fmt: skip
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
        apply_quantization_config,
    )
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import calculate_qparams
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    w_args = QuantizationArgs(**weights)
    a_args = QuantizationArgs(**activations) if activations is not None else None
    scheme = QuantizationScheme(targets=["Linear"], weights=w_args, input_activations=a_args)
    config = QuantizationConfig(config_groups={"group_0": scheme}, ignore=list(ignore))
    apply_quantization_config(model, config)
    ref: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            if not hasattr(module, "weight_scale"):
                continue
            w = module.weight.data
            lo, hi = _ranges(w, w_args)
            scale, zero = calculate_qparams(lo, hi, w_args)
            module.weight_scale.data.copy_(scale.reshape(module.weight_scale.shape))
            zp = getattr(module, "weight_zero_point", None)
            if zp is not None:
                zp.data.copy_(zero.reshape(zp.shape).to(zp.dtype))
                zero = zp.data
            else:
                zero = torch.zeros_like(module.weight_scale.data)
            ref[name] = fake_quantize(w, module.weight_scale.data, zero, w_args).float()
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=fmt)
    compressor.compress_model(model)
    model.save_pretrained(dst)
    compressor.update_config(str(dst))
    for f in src.iterdir():  # the tokenizer and chat template
        if f.is_file() and f.suffix != ".safetensors" and f.name != "config.json":
            target = dst / f.name
            if not target.exists():
                target.write_bytes(f.read_bytes())
    return ref


def _ranges(w: torch.Tensor, args: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Min and max of `w` [N, K] over each scale's elements, shaped as the scale."""
    N, K = w.shape
    strategy = str(args.strategy.value if hasattr(args.strategy, "value") else args.strategy)
    if strategy == "tensor":
        return w.amin().reshape(1), w.amax().reshape(1)
    if strategy == "channel":
        return w.amin(1, keepdim=True), w.amax(1, keepdim=True)
    if strategy == "group":
        g = w.reshape(N, K // args.group_size, args.group_size)
        return g.amin(-1), g.amax(-1)
    bn, bk = args.block_structure
    pad = w.new_full((-(-N // bn) * bn, -(-K // bk) * bk), float("nan"))
    pad[:N, :K] = w
    blocks = pad.reshape(pad.shape[0] // bn, bn, pad.shape[1] // bk, bk)
    return blocks.nan_to_num(float("inf")).amin((1, 3)), blocks.nan_to_num(-float("inf")).amax(
        (1, 3)
    )
