"""`verify` on quantized checkpoints: what transformers runs, and the original's figures.

* The check: transformers runs the *same* quantized weights, dequantized from the published
  tensors by a path that shares no code with our loader (model/quant/reference.py) into a
  temporary float32 dense checkpoint (`reference_dir`). The engine runs the packed weights
  through the quantized kernels, so the usual tight thresholds (engine/verify.py) check our
  kernels and loader, not the quantization.
* `--reference DIR`: the dense original the checkpoint was quantized from, run by
  transformers on the same tokens (teacher-forced): KL(original || ours) and argmax
  agreement per step measure the quantization's own error. Informational: it never fails
  verify. The original must have the same architecture (vocabulary, layers, widths).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from evokernel.errors import ConfigError
from evokernel.model.config import ModelConfig


@contextlib.contextmanager
def reference_dir(model_dir: str | Path) -> Iterator[Path]:
    """The directory transformers loads: `model_dir` itself when dense, else a temporary
    float32 dense copy of its weights (removed on exit)."""
    cfg = ModelConfig.from_dir(model_dir)
    if cfg.quantization is None:
        yield Path(model_dir)
        return
    from evokernel.model.quant.reference import dense_copy

    with dense_copy(model_dir) as path:
        yield path


def quantization_label(cfg: ModelConfig) -> str | None:
    """`gptq int4-g128, head int8-g128` / `fp8 fp8-b128x128, head dense`; None when dense."""
    q = cfg.quantization
    if q is None:
        return None
    head = None if cfg.tie_word_embeddings else q.spec("lm_head")
    return q.describe(head)


def check_original(cfg: ModelConfig, original: str | Path) -> None:
    """A one-line ConfigError unless `original` has `cfg`'s architecture."""
    differ = cfg.architecture_difference(ModelConfig.from_dir(original))
    if differ is not None:
        key, theirs, ours = differ
        raise ConfigError(
            f"--reference {original}: {key} is {theirs}, the checkpoint's is {ours}; give the "
            "model it was quantized from"
        )
