"""Find and check every file of a checkpoint directory, without reading a tensor's data.

`inspect_checkpoint(model_dir, cfg)` returns a `Checkpoint`: the parsed headers and, for every
tensor the model needs, where it lies. It raises `CheckpointError` (one line, naming the file,
key or tensor) for anything the loader could trip on later:

  * layout: `model.safetensors`, else `model.safetensors.index.json` + the shards it lists
    (the order transformers looks in); shards missing; index entries whose shard lacks the
    tensor; shard tensors the index does not list;
  * each file's header (see `safetensors_io.read_header`): truncation, corrupt JSON, offsets;
  * names against `hf_shapes(cfg)`: missing tensors, unexpected tensors, shapes, dtypes
    (BF16, F16 and F32 are loadable; each tensor is converted on its own).

Tolerated extras, never loaded: `*.rotary_emb.inv_freq` buffers (derived from the config).

A config that ties the embeddings may still come with an `lm_head.weight` (some exports write
one). It must have the embedding's shape and a loadable dtype; it is kept as `stored_head`, and
`head_is_tied()` decides, as transformers 5 does: equal values -> tied (`embed_tokens` serves
as the head); different values -> a separate head, loaded like an untied checkpoint's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import torch

from evokernel.errors import CheckpointError
from evokernel.model.config import ModelConfig, is_regular_file, read_json_object
from evokernel.model.safetensors_io import (
    TORCH_DTYPES,
    Header,
    TensorEntry,
    TensorMap,
    read_header,
)
from evokernel.model.weights import hf_shapes

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
_LAYER = re.compile(r"model\.layers\.(\d+)\.")


@dataclass(frozen=True)
class Checkpoint:
    model_dir: Path
    cfg: ModelConfig
    index: Path | None  # the index json of a sharded checkpoint
    headers: tuple[Header, ...]  # one per file, in the order first named
    tensors: dict[str, tuple[Header, TensorEntry]]  # every needed HF tensor -> where it is
    ignored: tuple[str, ...]  # present, tolerated, not loaded
    stored_head: tuple[Header, TensorEntry] | None = None  # lm_head.weight of a tied config

    def head_is_tied(self) -> bool:
        """Whether `embed_tokens` serves as the lm_head (reads data only for a stored head)."""
        if not self.cfg.tie_word_embeddings:
            return False
        if self.stored_head is None:
            return True
        return _same_values(self.tensors["model.embed_tokens.weight"], self.stored_head)

    @property
    def shards(self) -> int:
        return len(self.headers)

    @property
    def weight_bytes(self) -> int:
        """Bytes on disk of the tensors the model uses."""
        return sum(e.nbytes for _, e in self.tensors.values())

    @property
    def file_bytes(self) -> int:
        return sum(h.file_size for h in self.headers)

    @property
    def num_parameters(self) -> int:
        """Parameters of the model the checkpoint stands for (its dense shapes: a quantized
        checkpoint's packed words and scales are not parameters)."""
        total = 0
        for shape in hf_shapes(self.cfg).values():
            n = 1
            for d in shape:
                n *= d
            total += n
        return total

    def disk_dtypes(self) -> dict[str, int]:
        """safetensors dtype -> number of used tensors stored in it."""
        counts: dict[str, int] = {}
        for _, e in self.tensors.values():
            counts[e.dtype] = counts.get(e.dtype, 0) + 1
        return counts

    def summary(self) -> dict[str, Any]:
        """A JSON-able description, as `evokernel model info --json` prints it."""
        c = self.cfg
        return {
            "model_dir": str(self.model_dir),
            "model_type": c.model_type,
            "qkv_bias": c.qkv_bias,
            "qk_norm": c.qk_norm,
            "rope_scaling": c.rope_scaling.to_hf() if c.rope_scaling else None,
            "vocab_size": c.vocab_size,
            "hidden_size": c.hidden_size,
            "intermediate_size": c.intermediate_size,
            "num_hidden_layers": c.num_hidden_layers,
            "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads,
            "head_dim": c.head_dim,
            "gqa_ratio": c.gqa_ratio,
            "rms_norm_eps": c.rms_norm_eps,
            "rope_theta": c.rope_theta,
            "max_position_embeddings": c.max_position_embeddings,
            "tie_word_embeddings": c.tie_word_embeddings,
            "quantization": c.quantization.raw if c.quantization is not None else None,
            "lm_head": _head_kind(self),
            "config_dtype": c.dtype,
            "disk_dtypes": self.disk_dtypes(),
            "bos_token_id": c.bos_token_id,
            "eos_token_ids": list(c.eos_token_ids),
            "num_parameters": self.num_parameters,
            "weight_bytes": self.weight_bytes,
            "file_bytes": self.file_bytes,
            "shards": [h.path.name for h in self.headers],
            "index": self.index.name if self.index else None,
            "ignored_tensors": list(self.ignored),
            "tokenizer": (self.model_dir / "tokenizer.json").is_file(),
        }


def inspect_checkpoint(model_dir: str | Path, cfg: ModelConfig | None = None) -> Checkpoint:
    """Check `model_dir` completely against `cfg` (read from the directory when None)."""
    root = Path(model_dir)
    if not root.is_dir():
        raise CheckpointError(f"{root}: not a directory")
    if cfg is None:
        cfg = ModelConfig.from_dir(root)
    if is_regular_file(root / SINGLE_FILE):
        index = None
        header = read_header(root / SINGLE_FILE)
        headers: tuple[Header, ...] = (header,)
        located = {name: (header, e) for name, e in header.tensors.items()}
    elif is_regular_file(root / INDEX_FILE):
        index = root / INDEX_FILE
        headers, located = _read_sharded(root, index)
    else:
        raise CheckpointError(f"{root}: no {SINGLE_FILE} or {INDEX_FILE}")
    tensors, ignored = _match(root, cfg, index, located)
    head = located.get("lm_head.weight") if cfg.tie_word_embeddings else None
    return Checkpoint(root, cfg, index, headers, tensors, ignored, head)


def _read_sharded(
    root: Path, index: Path
) -> tuple[tuple[Header, ...], dict[str, tuple[Header, TensorEntry]]]:
    weight_map = _read_index(index)
    by_shard: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        by_shard.setdefault(shard, []).append(name)
    headers: list[Header] = []
    located: dict[str, tuple[Header, TensorEntry]] = {}
    for shard, names in by_shard.items():
        path = root / shard
        if not is_regular_file(path):
            raise CheckpointError(
                f"{index}: shard {shard!r} (holding {names[0]!r}) is missing from {root}"
            )
        header = read_header(path)
        headers.append(header)
        for name in names:
            entry = header.tensors.get(name)
            if entry is None:
                raise CheckpointError(
                    f"{index}: tensor {name!r} is mapped to shard {shard!r}, which does not hold it"
                )
            located[name] = (header, entry)
        listed = set(names)
        for name in header.tensors:
            if name not in listed:
                where = "another shard" if name in weight_map else "no shard"
                raise CheckpointError(
                    f"{path}: holds tensor {name!r}, which {index.name} maps to {where}"
                )
    return tuple(headers), located


def _read_index(index: Path) -> dict[str, str]:
    weight_map = read_json_object(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index}: missing or empty 'weight_map' object")
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise CheckpointError(f"{index}: weight_map[{name!r}] is not a file name: {shard!r}")
        parts = PurePosixPath(shard).parts
        if shard.startswith("/") or ".." in parts or "\\" in shard:
            raise CheckpointError(
                f"{index}: weight_map[{name!r}] = {shard!r} points outside the checkpoint"
            )
    return {str(k): v for k, v in weight_map.items()}


def _match(
    root: Path,
    cfg: ModelConfig,
    index: Path | None,
    located: dict[str, tuple[Header, TensorEntry]],
) -> tuple[dict[str, tuple[Header, TensorEntry]], tuple[str, ...]]:
    where = index or root / SINGLE_FILE
    _check_layer_count(cfg, where, located)
    expected = hf_shapes(cfg)
    packed: dict[str, tuple[str, ...]] = {}  # packed tensor -> its allowed dtypes
    if cfg.quantization is not None:
        from evokernel.model.quant.layout import quantized_tensors

        expected, packed = quantized_tensors(cfg, set(located))
    missing = [n for n in expected if n not in located]
    if missing:
        hint = ""
        if missing[0] == "lm_head.weight":
            hint = " (config.json has tie_word_embeddings=false)"
        raise CheckpointError(f"{where}: missing tensor {missing[0]!r}{_more(missing)}{hint}")
    ignored = sorted(n for n in located if n.endswith(IGNORED_SUFFIXES))
    head = ["lm_head.weight"] if cfg.tie_word_embeddings and "lm_head.weight" in located else []
    unexpected = [n for n in located if n not in expected and n not in ignored and n not in head]
    if unexpected:
        header, _ = located[unexpected[0]]
        raise CheckpointError(
            f"{header.path}: unexpected tensor {unexpected[0]!r}{_more(unexpected)}; config.json "
            f"describes {cfg.num_hidden_layers} layers"
            + (", tied embeddings" if cfg.tie_word_embeddings else "")
        )
    shapes = dict(expected)
    if head:
        shapes["lm_head.weight"] = expected["model.embed_tokens.weight"]
    for name, want in shapes.items():
        header, entry = located[name]
        if entry.shape != want and not (_one_value(entry.shape) and _one_value(want)):
            raise CheckpointError(
                f"{header.path}: tensor {name!r} has shape {list(entry.shape)}, "
                f"config.json implies {list(want)}"
            )
        allowed = packed.get(name) or tuple(TORCH_DTYPES)
        if entry.dtype not in allowed:
            raise CheckpointError(
                f"{header.path}: tensor {name!r} has dtype {entry.dtype}; "
                f"supported: {', '.join(allowed)}"
            )
    return {n: located[n] for n in expected}, tuple(ignored)


def _one_value(shape: tuple[int, ...]) -> bool:
    """A single value, stored as a scalar ([]) or as [1]: writers differ, the value does not."""
    return len(shape) <= 1 and all(d == 1 for d in shape)


def _check_layer_count(
    cfg: ModelConfig, where: Path, located: dict[str, tuple[Header, TensorEntry]]
) -> None:
    """Name the first missing layer before listing every tensor the config implies: a config
    claiming 10**9 layers would otherwise build a name table for each of them."""
    present = {int(m[1]) for name in located if (m := _LAYER.match(name))}
    if cfg.num_hidden_layers <= len(present):
        return
    first = next(i for i in range(len(present) + 1) if i not in present)
    raise CheckpointError(
        f"{where}: missing tensor 'model.layers.{first}.input_layernorm.weight' (config.json "
        f"describes {cfg.num_hidden_layers} layers; the checkpoint holds {len(present)})"
    )


def _same_values(a: tuple[Header, TensorEntry], b: tuple[Header, TensorEntry]) -> bool:
    """Whether two stored tensors of one shape hold equal values (compared as float32)."""
    ma, mb = TensorMap(a[0]), TensorMap(b[0])
    try:
        return _equal_rows(ma, a[1], mb, b[1])
    finally:
        ma.close()
        mb.close()


def _equal_rows(ma: TensorMap, ea: TensorEntry, mb: TensorMap, eb: TensorEntry) -> bool:
    # 64 MB of rows at a time, pages dropped as we go: RAM stays bounded for any vocabulary.
    va, vb = ma.view(ea.name), mb.view(eb.name)
    rows = ea.shape[0]
    step = max(1, (64 << 20) // max(1, ea.nbytes // max(rows, 1)))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        x, y = va[r0:r1], vb[r0:r1]
        same = torch.equal(x, y) if x.dtype == y.dtype else torch.equal(x.float(), y.float())
        ma.release(ea.name, (r0, r1))
        mb.release(eb.name, (r0, r1))
        if not same:
            return False
    return True


def _head_kind(ckpt: Checkpoint) -> str:
    if not ckpt.cfg.tie_word_embeddings:
        return "untied"
    if ckpt.stored_head is None:
        return "tied"
    if ckpt.head_is_tied():
        return "tied (the stored lm_head.weight equals the embedding)"
    return "separate (config ties it, but the stored lm_head.weight differs; used as is)"


def _more(names: Iterable[str]) -> str:
    n = len(list(names)) - 1
    return f" (and {n} more)" if n > 0 else ""
