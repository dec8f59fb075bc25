"""An OpSet that sends packed weights to the quantized launchers (ops/quant.py) and dense ones
to the base set: what the engine's fused ops do once they dispatch on the weight type, built
here from the OpSet's public `replace` so the end-to-end tests run the quantized kernels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.nn.functional as F

from evokernel.model.weights import PackedWeight
from evokernel.ops import quant
from evokernel.ops.registry import OpSet

# op -> (position of its weight argument, the launcher for a packed weight)
PACKED: dict[str, tuple[int, Callable[..., Any]]] = {
    "linear": (1, quant.linear),
    "logits": (1, lambda x, w: F.linear(x, w.dequantize(x.dtype)).float()),
    "norm_linear": (2, quant.norm_linear),
    "linear_residual": (1, quant.linear_residual),
    "norm_gate_up_silu": (2, quant.norm_gate_up_silu),
    "norm_logits": (2, quant.norm_logits),
    "greedy_head": (2, quant.greedy_head),
}


def packed_opset(base: OpSet) -> OpSet:
    def pick(name: str) -> tuple[Callable[..., Any], str]:
        pos, launcher = PACKED[name]
        dense = getattr(base, name)

        def op(*args: Any, **kwargs: Any) -> Any:
            if isinstance(args[pos], PackedWeight):
                return launcher(*args, **kwargs)
            return dense(*args, **kwargs)

        return op, f"{base.origin.get(name, 'composed')}+packed"

    return base.replace(**{name: pick(name) for name in PACKED})
