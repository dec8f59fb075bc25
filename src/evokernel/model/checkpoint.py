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

Tolerated extras, never loaded: `*.rotary_emb.inv_freq` buffers (derived from the config), and
`lm_head.weight` in a checkpoint whose config ties the embeddings, as some exports write. Such
an lm_head must have the embedding's shape; it is ignored and `embed_tokens` serves as the head,
which is what transformers does with such a checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from evokernel.errors import CheckpointError
from evokernel.model.config import Qwen3Config
from evokernel.model.safetensors_io import TORCH_DTYPES, Header, TensorEntry, read_header
from evokernel.model.weights import hf_shapes

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


@dataclass(frozen=True)
class Checkpoint:
    model_dir: Path
    cfg: Qwen3Config
    index: Path | None  # the index json of a sharded checkpoint
    headers: tuple[Header, ...]  # one per file, in the order first named
    tensors: dict[str, tuple[Header, TensorEntry]]  # every needed HF tensor -> where it is
    ignored: tuple[str, ...]  # present, tolerated, not loaded

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
        total = 0
        for _, e in self.tensors.values():
            n = 1
            for d in e.shape:
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
            "model_type": "qwen3",
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


def inspect_checkpoint(model_dir: str | Path, cfg: Qwen3Config | None = None) -> Checkpoint:
    """Check `model_dir` completely against `cfg` (read from the directory when None)."""
    root = Path(model_dir)
    if not root.is_dir():
        raise CheckpointError(f"{root}: not a directory")
    if cfg is None:
        cfg = Qwen3Config.from_dir(root)
    if (root / SINGLE_FILE).is_file():
        index = None
        header = read_header(root / SINGLE_FILE)
        headers: tuple[Header, ...] = (header,)
        located = {name: (header, e) for name, e in header.tensors.items()}
    elif (root / INDEX_FILE).is_file():
        index = root / INDEX_FILE
        headers, located = _read_sharded(root, index)
    else:
        raise CheckpointError(f"{root}: no {SINGLE_FILE} or {INDEX_FILE}")
    tensors, ignored = _match(root, cfg, index, located)
    return Checkpoint(root, cfg, index, headers, tensors, ignored)


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
        if not path.is_file():
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
    try:
        data = json.loads(index.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        msg = str(err).splitlines()[0]
        raise CheckpointError(f"{index}: not valid JSON ({msg})") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
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
    cfg: Qwen3Config,
    index: Path | None,
    located: dict[str, tuple[Header, TensorEntry]],
) -> tuple[dict[str, tuple[Header, TensorEntry]], tuple[str, ...]]:
    expected = hf_shapes(cfg)
    where = index or root / SINGLE_FILE
    missing = [n for n in expected if n not in located]
    if missing:
        hint = ""
        if missing[0] == "lm_head.weight":
            hint = " (config.json has tie_word_embeddings=false)"
        raise CheckpointError(f"{where}: missing tensor {missing[0]!r}{_more(missing)}{hint}")
    ignored = sorted(n for n in located if n not in expected and _tolerated(n, cfg))
    unexpected = [n for n in located if n not in expected and n not in ignored]
    if unexpected:
        header, _ = located[unexpected[0]]
        raise CheckpointError(
            f"{header.path}: unexpected tensor {unexpected[0]!r}{_more(unexpected)}; config.json "
            f"describes {cfg.num_hidden_layers} layers"
            + (", tied embeddings" if cfg.tie_word_embeddings else "")
        )
    shapes = dict(expected)
    if "lm_head.weight" in ignored:
        shapes["lm_head.weight"] = expected["model.embed_tokens.weight"]
    for name in [*expected, *ignored]:
        header, entry = located[name]
        want = shapes.get(name)
        if want is not None and entry.shape != want:
            raise CheckpointError(
                f"{header.path}: tensor {name!r} has shape {list(entry.shape)}, "
                f"config.json implies {list(want)}"
            )
        if name in expected and entry.dtype not in TORCH_DTYPES:
            raise CheckpointError(
                f"{header.path}: tensor {name!r} has dtype {entry.dtype}; "
                f"supported: {', '.join(TORCH_DTYPES)}"
            )
    return {n: located[n] for n in expected}, tuple(ignored)


def _tolerated(name: str, cfg: Qwen3Config) -> bool:
    if name == "lm_head.weight":
        return cfg.tie_word_embeddings
    return name.endswith(IGNORED_SUFFIXES)


def _more(names: Iterable[str]) -> str:
    n = len(list(names)) - 1
    return f" (and {n} more)" if n > 0 else ""
