"""The decoder description: an HF `config.json` (either layout) parsed once into `ModelConfig`.

One type for every family of model/families.py (qwen3, qwen2, llama, mistral): the shapes, the
family's switches (`qkv_bias`, `qk_norm`, from the family table), RoPE (model/rope.py: base
frequency and an optional `linear` / `llama3` scaling), the head's tying and the token ids.
Both layouts are accepted:
  * transformers 4.x / the hub:  top-level `rope_theta`, `rope_scaling`, `torch_dtype`
  * transformers 5.x:            `rope_parameters: {rope_type, rope_theta, ...}`, `dtype`
An unsupported family, RoPE rule, sliding window, bias or activation is a `CheckpointError`
naming the key and what is supported. Keys a config.json leaves out take transformers' own
defaults for the family (e.g. qwen3's `head_dim` 128, llama's hidden_size // heads), so we
build the model transformers would.

`from_dir` also reads `generation_config.json` when present: its `eos_token_id` (an int or a
list) is merged into `eos_token_ids` after config.json's own, because generation stops on
either (Qwen3 lists `<|im_end|>` in config.json and adds `<|endoftext|>` there).

Token ids outside the vocabulary (`bos_token_id`, any `eos_token_id` of either file) are
dropped with a one-line warning on stderr, printed once per file and key: transformers loads
such configs (a hub config.json copied onto a small test vocabulary has them), and no token
the model can emit could match them anyway.

`ModelConfig` is the one object the loader, the engine, the kernels' switches, the tasks' shapes
and the random-checkpoint writer share (parsed once, passed down); it is frozen and validated
in `__post_init__`.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from evokernel.errors import CheckpointError, ConfigError
from evokernel.model.families import FAMILIES, Family, family
from evokernel.model.quant.config import QuantConfig, parse_quantization
from evokernel.model.rope import RopeScaling, parse_rope, to_float

DTYPE_NAMES = ("bfloat16", "float16", "float32")
CONFIG_LAYOUTS = ("transformers5", "legacy")
GENERATION_CONFIG = "generation_config.json"
# The shapes that make two checkpoints one architecture (what a quantized copy must share with
# the model it came from).
ARCHITECTURE_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
)


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 40960
    tie_word_embeddings: bool = True
    dtype: str = "bfloat16"  # dtype of the weights on disk, as the config names it
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    model_type: str = "qwen3"  # a key of model/families.py FAMILIES
    rope_scaling: RopeScaling | None = None
    # How the projections are stored: None for dense weights, else `quantization_config`
    # parsed (model/quant/config.py)
    quantization: QuantConfig | None = None

    def __post_init__(self) -> None:
        if self.model_type not in FAMILIES:
            family(self.model_type, "config")  # raises, naming the supported ones
        for key in (*ARCHITECTURE_KEYS, "max_position_embeddings"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise CheckpointError(f"config: {key} must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError(
                "config: num_attention_heads "
                f"({self.num_attention_heads}) is not a multiple of num_key_value_heads "
                f"({self.num_key_value_heads})"
            )
        if self.head_dim % 2:
            raise CheckpointError(f"config: head_dim must be even for RoPE, got {self.head_dim}")
        if self.dtype not in DTYPE_NAMES:
            raise CheckpointError(f"config: unsupported dtype {self.dtype!r} (use {DTYPE_NAMES})")
        # JSON readers accept NaN, Infinity and 1e999: an infinite theta or epsilon would
        # silently flatten RoPE or the norms.
        for key in ("rms_norm_eps", "rope_theta"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value > 0):
                raise CheckpointError(f"config: {key} must be finite and > 0, got {value!r}")
        ids: dict[str, tuple[int, ...]] = {"eos_token_id": self.eos_token_ids}
        if self.bos_token_id is not None:
            ids["bos_token_id"] = (self.bos_token_id,)
        for key, values in ids.items():
            for v in values:
                if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < self.vocab_size:
                    raise CheckpointError(
                        f"config: {key} {v!r} is not a token id below vocab_size {self.vocab_size}"
                    )

    # The family's switches and derived sizes ---------------------------------------------
    @property
    def family(self) -> Family:
        return FAMILIES[self.model_type]

    @property
    def qkv_bias(self) -> bool:
        """Whether q_proj, k_proj and v_proj carry biases (qwen2)."""
        return self.family.qkv_bias is True

    @property
    def qk_norm(self) -> bool:
        """Whether q and k are RMS-normalised per head before RoPE (qwen3)."""
        return self.family.qk_norm

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def gqa_ratio(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    def architecture_difference(self, other: ModelConfig) -> tuple[str, Any, Any] | None:
        """The first of ARCHITECTURE_KEYS where `other` differs: (key, other's, ours)."""
        for key in ARCHITECTURE_KEYS:
            if getattr(other, key) != getattr(self, key):
                return key, getattr(other, key), getattr(self, key)
        return None

    def check_tokens(
        self, ids: Sequence[int], new_tokens: int, flag: str, positions: int | None = None
    ) -> None:
        """A one-line ConfigError unless every id of the prompt `ids` is in the vocabulary and
        the prompt plus `new_tokens` fits in `positions` (default: max_position_embeddings).
        `flag` names the option that sets `new_tokens`."""
        limit = self.max_position_embeddings if positions is None else positions
        if not ids:
            raise ConfigError("every prompt needs at least one token")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ConfigError(
                f"prompt token id {bad[0]} is outside the vocabulary [0, {self.vocab_size})"
            )
        if len(ids) + new_tokens > limit:
            raise ConfigError(
                f"{flag} {new_tokens}: the {len(ids)}-token prompt + {new_tokens} exceeds the "
                f"model's {limit} positions"
            )

    # Parsing -----------------------------------------------------------------------------
    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], source: str = "config.json") -> ModelConfig:
        """Parse an HF config dict (either layout). Errors name `source` and the key."""
        cfg, dropped = cls._parse(d, source)
        warn_outside_vocab(source, cfg.vocab_size, dropped)
        return cfg

    @classmethod
    def _parse(cls, d: dict[str, Any], source: str) -> tuple[ModelConfig, list[str]]:
        """(config, "key ids" of each token id key whose ids outside the vocabulary were
        dropped)."""
        fam = family(d.get("model_type"), source)
        required = (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
        )
        for key in required:
            if key not in d:
                raise CheckpointError(f"{source}: missing key {key!r}")
        heads = d["num_attention_heads"]
        head_dim = d.get("head_dim", fam.head_dim)  # the family's default when absent
        if head_dim is None:
            hidden = d["hidden_size"]
            ok = isinstance(heads, int) and heads > 0 and isinstance(hidden, int)
            head_dim = hidden // heads if ok else 0
        _check_switches(d, fam, source)
        rope_theta, rope_scaling = parse_rope(d, source)
        dtype = d.get("dtype") or d.get("torch_dtype") or "bfloat16"
        if not isinstance(dtype, str):
            raise CheckpointError(f"{source}: dtype must be a string, got {dtype!r}")
        dtype = dtype.removeprefix("torch.")
        kv_heads = d.get("num_key_value_heads", fam.kv_heads)  # the family's default
        for key in ("rms_norm_eps", "tie_word_embeddings", "bos_token_id"):
            kind = {"tie_word_embeddings": bool, "bos_token_id": int}.get(key, (int, float))
            value = d.get(key)
            if value is not None and not isinstance(value, kind):
                raise CheckpointError(f"{source}: {key} has the wrong type: {value!r}")
        fields = _fields(d, heads, kv_heads, head_dim, rope_theta, dtype, source)
        if d.get("quantization_config") is not None:
            fields["quantization"] = parse_quantization(d["quantization_config"], source)
        fields |= {
            "model_type": fam.model_type,
            "rope_scaling": rope_scaling,
            "max_position_embeddings": d.get("max_position_embeddings", fam.max_positions),
        }
        vocab = fields["vocab_size"]
        dropped: list[str] = []
        if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0:
            fields["eos_token_ids"] = _in_vocab(fields["eos_token_ids"], vocab, "eos", dropped)
            if fields["bos_token_id"] is not None:
                bos = _in_vocab((fields["bos_token_id"],), vocab, "bos", dropped)
                fields["bos_token_id"] = bos[0] if bos else None
        try:
            return cls(**fields), dropped
        except CheckpointError as err:
            raise CheckpointError(f"{source}: {str(err).removeprefix('config: ')}") from None

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> ModelConfig:
        if not Path(model_dir).is_dir():
            raise CheckpointError(f"{model_dir}: not a directory")
        path = Path(model_dir) / "config.json"
        if not is_regular_file(path):
            raise CheckpointError(f"{model_dir}: no config.json")
        cfg, dropped = cls._parse(read_json_object(path), source=str(path))
        notes = [f"{path.name} {note}" for note in dropped]
        extra = _in_vocab(read_generation_eos(model_dir), cfg.vocab_size, "eos", notes)
        if len(notes) > len(dropped):
            notes[-1] = f"{GENERATION_CONFIG} {notes[-1]}"
        warn_outside_vocab(str(model_dir), cfg.vocab_size, notes)
        merged = cfg.eos_token_ids + tuple(i for i in extra if i not in cfg.eos_token_ids)
        return cfg if merged == cfg.eos_token_ids else replace(cfg, eos_token_ids=merged)

    def to_hf_dict(self, layout: str = "transformers5") -> dict[str, Any]:
        """config.json content, loadable by transformers (the family's own class).

        `layout="transformers5"`: `rope_parameters` and `dtype`; `"legacy"`: top-level
        `rope_theta`, `rope_scaling` (null without scaling) and `torch_dtype`, as the hub's
        configs.
        """
        if layout not in CONFIG_LAYOUTS:
            raise ValueError(f"layout must be one of {CONFIG_LAYOUTS}, got {layout!r}")
        d = asdict(self)
        d.pop("quantization")
        if self.quantization is not None:
            d["quantization_config"] = dict(self.quantization.raw)
        eos = d.pop("eos_token_ids")
        d["eos_token_id"] = (eos[0] if len(eos) == 1 else list(eos)) if eos else None
        scaling = d.pop("rope_scaling")
        scaling = self.rope_scaling.to_hf() if self.rope_scaling is not None else None
        if layout == "legacy":
            d["torch_dtype"] = d.pop("dtype")
            d["rope_scaling"] = scaling
        else:
            params = {"rope_type": "default", "rope_theta": d.pop("rope_theta")}
            d["rope_parameters"] = params | (scaling or {})
        fam = self.family
        d.update(
            architectures=[fam.architecture],
            hidden_act="silu",
            attention_dropout=0.0,
            use_cache=True,
        )
        if fam.model_type in ("qwen3", "llama"):
            d["attention_bias"] = False
        if fam.model_type == "llama":
            d["mlp_bias"] = False
        if fam.sliding_key == "use_sliding_window":
            d.update(use_sliding_window=False, sliding_window=None)
        elif fam.sliding_key == "sliding_window":
            d["sliding_window"] = None
        return d


def _check_switches(d: dict[str, Any], fam: Family, source: str) -> None:
    """Refuse what this family's config can switch on that no kernel here computes."""
    if fam.sliding_key == "use_sliding_window" and d.get("use_sliding_window"):
        raise CheckpointError(f"{source}: use_sliding_window=true is not supported")
    if fam.sliding_key == "sliding_window":
        window = d.get("sliding_window", fam.sliding_default)
        limit = d.get("max_position_embeddings", fam.max_positions)
        if window is not None and not (isinstance(window, int) and window >= limit):
            raise CheckpointError(
                f"{source}: sliding_window={window!r} is not supported (only null, or a window "
                "no shorter than max_position_embeddings)"
            )
    layer_types = d.get("layer_types") or []
    if not isinstance(layer_types, list):
        raise CheckpointError(f"{source}: layer_types must be a list")
    layers = d["num_hidden_layers"]
    if layer_types and len(layer_types) != layers:  # transformers refuses it too
        raise CheckpointError(
            f"{source}: layer_types has {len(layer_types)} entries; num_hidden_layers is {layers!r}"
        )
    for i, kind in enumerate(layer_types):
        if kind != "full_attention":
            raise CheckpointError(
                f"{source}: layer_types[{i}] is {kind!r}; only full_attention is supported"
            )
    if d.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"{source}: unsupported hidden_act {d.get('hidden_act')!r}")
    if fam.qkv_bias is None and d.get("attention_bias"):
        raise CheckpointError(
            f"{source}: attention_bias=true is not supported ({fam.model_type} then also "
            "biases o_proj)"
        )
    if d.get("mlp_bias"):
        raise CheckpointError(f"{source}: mlp_bias=true is not supported")


def _fields(
    d: dict[str, Any],
    heads: Any,
    kv_heads: Any,
    head_dim: Any,
    rope_theta: float,
    dtype: str,
    source: str,
) -> dict[str, Any]:
    return dict(
        vocab_size=d["vocab_size"],
        hidden_size=d["hidden_size"],
        intermediate_size=d["intermediate_size"],
        num_hidden_layers=d["num_hidden_layers"],
        num_attention_heads=heads,
        num_key_value_heads=heads if kv_heads is None else kv_heads,
        head_dim=head_dim,
        rms_norm_eps=to_float(d.get("rms_norm_eps", 1e-6), "rms_norm_eps", source),
        rope_theta=rope_theta,
        tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
        dtype=dtype,
        bos_token_id=d.get("bos_token_id"),
        eos_token_ids=_token_ids(d.get("eos_token_id"), source),
    )


def read_generation_eos(model_dir: str | Path) -> tuple[int, ...]:
    """`eos_token_id` of `model_dir/generation_config.json` (empty when the file is absent)."""
    path = Path(model_dir) / GENERATION_CONFIG
    if not is_regular_file(path):
        return ()
    data = read_json_object(path)
    return _token_ids(data.get("eos_token_id"), str(path))


def is_regular_file(path: Path) -> bool:
    """Whether a regular file is at `path` (False when nothing is). Anything else there (a
    directory, a FIFO, which would block its reader, a device) is a one-line CheckpointError,
    not "missing"."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ({err.strerror or err})") from None
    if not stat.S_ISREG(mode):
        raise CheckpointError(f"{path}: not a regular file")
    return True


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object from `path`; unreadable or malformed files are one-line CheckpointErrors."""
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ({err.strerror or err})") from None
    except (ValueError, RecursionError) as err:
        # JSONDecodeError and UnicodeDecodeError are ValueErrors, as is an integer of more
        # digits than Python converts; RecursionError: nesting deeper than the parser goes.
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{path}: not valid JSON ({msg})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


_WARNED: set[str] = set()


def _in_vocab(
    ids: tuple[int, ...], vocab_size: int, kind: str, notes: list[str]
) -> tuple[int, ...]:
    """`ids` without those outside [0, vocab_size); a note names the dropped ones."""
    outside = [i for i in ids if i >= vocab_size]
    if outside:
        notes.append(f"{kind}_token_id {', '.join(map(str, outside))}")
    return tuple(i for i in ids if i < vocab_size)


def warn_outside_vocab(source: str, vocab_size: int, notes: list[str]) -> None:
    """One stderr line for the token ids `notes` name, printed once per process."""
    if not notes:
        return
    message = (
        f"warning: {source}: token ids outside the vocabulary [0, {vocab_size}) ignored: "
        + "; ".join(notes)
    )
    if message not in _WARNED:
        _WARNED.add(message)
        print(message, file=sys.stderr)


def _token_ids(value: object, source: str) -> tuple[int, ...]:
    ids = value if isinstance(value, list) else ([] if value is None else [value])
    for v in ids:
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise CheckpointError(f"{source}: eos_token_id must hold token ids, got {value!r}")
    return tuple(ids)
