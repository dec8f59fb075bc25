"""Quantized checkpoints in `bench decode`: their system names and the bytes they read.

    evokernel bench decode --model BF16_DIR --quantized INT4_DIR --quantized FP8_DIR ...

runs our engine on each quantized checkpoint (the same architecture as --model) in the same
run as the bf16 systems, as a system named after its format (`system_name`):
`evokernel:gptq-int4-g128+head-int8-g128`, `evokernel:fp8-b128x128+head-dense`, ...

Each system's floor is the bytes it reads per step (`step_bytes`: packed weights with their
scales, zero points and column orders as loaded, the norms, the head in its own format; the
embedding table is not read but for one row) plus the KV cache; the bf16 floor of the same
architecture (bench/floor.py) is reported beside it, in the result file's `floors`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evokernel.errors import ConfigError
from evokernel.model.config import ModelConfig
from evokernel.model.weights import ModelWeights, storage


def system_name(cfg: ModelConfig) -> str:
    q = cfg.quantization
    assert q is not None, "a dense checkpoint"
    layer = q.spec("model.layers.0.self_attn.q_proj")
    head = None if cfg.tie_word_embeddings else q.spec("lm_head")
    body = layer.label if layer is not None else "dense"
    return f"evokernel:{q.method}-{body}+head-{head.label if head else 'dense'}"


def check_quantized(base: ModelConfig, model_dir: Path) -> ModelConfig:
    """The config of `model_dir`: quantized, with `base`'s architecture (one-line errors)."""
    cfg = ModelConfig.from_dir(model_dir)
    if cfg.quantization is None:
        raise ConfigError(f"--quantized {model_dir}: not a quantized checkpoint")
    differ = base.architecture_difference(cfg)
    if differ is not None:
        key, theirs, ours = differ
        raise ConfigError(
            f"--quantized {model_dir}: {key} is {theirs}, --model's is {ours} (the same "
            "architecture is compared)"
        )
    return cfg


def step_bytes(weights: ModelWeights) -> int:
    """Bytes one decode step reads from the weights (the embedding table aside)."""
    tensors = [weights.final_norm, *storage(weights.lm_head)]
    for layer in weights.layers:
        for value in vars(layer).values():
            tensors.extend(storage(value))
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def system_bytes(system: Any) -> int | None:
    """The weight bytes a loaded bench system reads per step, where it says (our engine
    from its weights; gptfast_int8 its own); None: the checkpoint's dense bytes."""
    own = getattr(system, "weight_bytes", None)
    if isinstance(own, int):
        return own
    model = getattr(system, "model", None)
    weights = getattr(model, "weights", None)
    if isinstance(weights, ModelWeights):
        return step_bytes(weights)
    return None
