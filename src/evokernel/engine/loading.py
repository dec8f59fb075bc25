"""Checkpoint directory -> a ready `DecoderModel` (and its tokenizer, when the directory has one).

    model = load_engine(model_dir, device="cuda", dtype=None, ops="triton")

`device` None picks CUDA when present; `dtype` None picks the device default (bfloat16 on CUDA,
float32 on CPU); `pdl` None launches the Triton decode kernels with programmatic dependent
launch where the GPU supports it (False turns it off); `kernels` a kernel pack directory (or
a `Pack` from `packs.use.open_pack`): checked against the checkpoint's config, the device and
the dtype, trusted, imported and self-checked before any weight loads (`open_pack`; a refusal
is one `PackError` line), then `decode_layer` runs its programs (engine/packs/dispatch.py
`packed_ops`). config.json is parsed once, here, and passed down. The Triton mode is set for
the device (`evokernel.device.prepare`) before any kernel or candidate is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from evokernel import device as devices
from evokernel.engine.decoder import DecoderModel
from evokernel.errors import EvokernelError
from evokernel.model import tokenizer as tokenizers
from evokernel.model.config import ModelConfig
from evokernel.model.loader import load_weights, resolve_dtype
from evokernel.model.tokenizer import TOKENIZER_FILE
from evokernel.ops.registry import OpSet

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from evokernel.engine.packs.format import Pack


def load_engine(
    model_dir: str | Path,
    device: str | None = None,
    dtype: torch.dtype | str | None = None,
    ops: str | OpSet = "torch",
    max_seq_len: int | None = None,
    pdl: bool | None = None,
    kernels: str | Path | Pack | None = None,
) -> DecoderModel:
    dev = devices.resolve(device)
    devices.prepare(dev)
    dt = devices.default_dtype(dev) if dtype is None else resolve_dtype(dtype)
    opset = ops if isinstance(ops, OpSet) else OpSet.named(ops, pdl)
    cfg = ModelConfig.from_dir(model_dir)  # parsed once, passed down
    if kernels is not None:
        from evokernel.engine.packs.dispatch import packed_ops
        from evokernel.engine.packs.use import open_pack

        layer = opset.decode_layer
        pack = open_pack(kernels, cfg, dev, dt, layer, max_len=max_seq_len)
        opset = packed_ops(opset, pack)
    weights = load_weights(model_dir, cfg, device=dev, dtype=dt)
    return DecoderModel(cfg, weights, opset, max_seq_len=max_seq_len)


def load_tokenizer(model_dir: str | Path) -> Tokenizer | None:
    """The directory's tokenizer, or None when it has no tokenizer.json."""
    if not (Path(model_dir) / TOKENIZER_FILE).is_file():
        return None
    return tokenizers.load_tokenizer(model_dir)


def encode_prompt(model_dir: str | Path, text: str) -> list[int]:
    """Token ids of `text`; a one-line error when the directory has no tokenizer."""
    if not (Path(model_dir) / TOKENIZER_FILE).is_file():
        raise EvokernelError(
            f"--prompt needs {TOKENIZER_FILE} in {model_dir}; pass token ids with --prompt-ids"
        )
    ids: list[int] = tokenizers.load_tokenizer(model_dir).encode(text).ids
    if not ids:
        raise EvokernelError("--prompt encodes to no tokens")
    return ids
