"""The gpt-fast int8 weight-only baseline: the gpt-fast-style model (gptfast_model.py) with
every linear weight swapped for gpt-fast's `WeightOnlyInt8Linear`, as gpt-fast's
`quantize.py` (`WeightOnlyInt8QuantHandler`) builds it, then compiled as `gptfast` is.

gpt-fast quantizes in memory from the dense weights: per output row, symmetric, scale =
max(|w|) / 127.5 (`dynamically_quantize_per_channel(w, -128, 127, torch.int8)`, the scale in
the weight dtype, at least float32 eps), int8 = clamp(round(w / scale), -128, 127); the
forward is `F.linear(x, weight.to(x.dtype)) * scales`, which Inductor fuses into one GEMV
per projection. Every linear is replaced, the output head included (gpt-fast's `output` is an
`nn.Linear`); the embedding stays dense. On a quantized checkpoint the weights are first
dequantized (gptfast_model.py), so this is gpt-fast's int8 of the same model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from evokernel.bench.systems.gptfast import GptFastSystem
from evokernel.bench.systems.gptfast_model import Transformer

WEIGHTS = {"attention": ("wqkv", "wo"), "feed_forward": ("w13", "w2")}


class WeightOnlyInt8Linear(nn.Module):
    """gpt-fast's module: int8 weight [N, K] and per-row scales [N] in the model dtype."""

    weight: torch.Tensor
    scales: torch.Tensor

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        weight, scales = quantize_per_channel(w)
        self.register_buffer("weight", weight)
        self.register_buffer("scales", scales)

    @property
    def dtype(self) -> torch.dtype:
        return self.scales.dtype

    @property
    def device(self) -> torch.device:
        return self.scales.device

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.to(dtype=x.dtype)) * self.scales


@torch.no_grad()
def quantize_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = w.float()
    lo, hi = torch.aminmax(x, dim=1)
    top = torch.maximum(-torch.clamp(lo, max=0), torch.clamp(hi, min=0))
    scales = torch.clamp(top / ((127 - (-128)) / 2), min=torch.finfo(torch.float32).eps)
    scales = scales.to(w.dtype)
    q = torch.clamp(torch.round(x / scales.float().unsqueeze(-1)), -128, 127).to(torch.int8)
    return q, scales


def to_int8(model: Transformer) -> Transformer:
    """Every linear weight of `model` as a `WeightOnlyInt8Linear`, in place."""
    for block in model.layers:
        for part, names in WEIGHTS.items():
            module = getattr(block, part)
            for name in names:
                w = getattr(module, name)
                delattr(module, name)
                setattr(module, name, WeightOnlyInt8Linear(w.data))
    head = model.output
    del model.output
    model.output = WeightOnlyInt8Linear(head.data)  # type: ignore[assignment]
    return model


def weight_bytes(model: Transformer) -> int:
    """Bytes one decode step reads: every buffer and parameter but the embedding table."""
    total = 0
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if name in ("tok_embeddings", "cos_table", "sin_table"):
            continue
        total += t.numel() * t.element_size()
    return total


class GptFastInt8System(GptFastSystem):
    name = "gptfast_int8"

    def __init__(self, model_dir: str | Path, device: str, dtype: torch.dtype) -> None:
        super().__init__(model_dir, device, dtype)
        assert self.model is not None
        self.model = to_int8(self.model)
        self.weight_bytes = weight_bytes(self.model)
        if device == "cuda":
            torch.cuda.empty_cache()

    def setup(self) -> dict[str, Any]:
        return super().setup() | {
            "quantization": "gpt-fast WeightOnlyInt8Linear: int8 per row, symmetric, every "
            "linear including the head"
        }
