"""Qwen3 architecture config, parsed from an HF `config.json` in either layout.

Both layouts published for Qwen3 are accepted:
  * transformers 4.x / the hub:  top-level `rope_theta`, `rope_scaling`, `torch_dtype`
  * transformers 5.x:            `rope_parameters: {rope_type, rope_theta}`, `dtype`
Only plain RoPE (`rope_type` "default", or no scaling) is supported; anything else is a
`CheckpointError` naming the key. Sliding-window attention is rejected the same way.

`Qwen3Config` is the one object the loader, the engine and the random-checkpoint writer
share; it is frozen and validated in `__post_init__`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evokernel.errors import CheckpointError

SUPPORTED_MODEL_TYPES = ("qwen3",)
DTYPE_NAMES = ("bfloat16", "float16", "float32")


@dataclass(frozen=True)
class Qwen3Config:
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

    def __post_init__(self) -> None:
        positive = (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
        )
        for key in positive:
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
        if not (self.rms_norm_eps > 0):
            raise CheckpointError(f"config: rms_norm_eps must be > 0, got {self.rms_norm_eps!r}")
        if not (self.rope_theta > 0):
            raise CheckpointError(f"config: rope_theta must be > 0, got {self.rope_theta!r}")

    # Derived sizes -----------------------------------------------------------------------
    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def gqa_ratio(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    # Parsing -----------------------------------------------------------------------------
    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], source: str = "config.json") -> Qwen3Config:
        """Parse an HF config dict (either layout). Errors name `source` and the key."""
        model_type = d.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise CheckpointError(
                f"{source}: unsupported model_type {model_type!r} (supported: qwen3)"
            )
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
        head_dim = d.get("head_dim") or (d["hidden_size"] // heads if heads else 0)
        if d.get("use_sliding_window"):
            raise CheckpointError(f"{source}: use_sliding_window=true is not supported")
        if d.get("hidden_act", "silu") != "silu":
            raise CheckpointError(f"{source}: unsupported hidden_act {d.get('hidden_act')!r}")
        if d.get("attention_bias"):
            raise CheckpointError(f"{source}: attention_bias=true is not supported")

        rope_theta = _rope_theta(d, source)
        dtype = d.get("dtype") or d.get("torch_dtype") or "bfloat16"
        if not isinstance(dtype, str):
            raise CheckpointError(f"{source}: dtype must be a string, got {dtype!r}")
        dtype = dtype.removeprefix("torch.")
        eos = d.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        return cls(
            vocab_size=d["vocab_size"],
            hidden_size=d["hidden_size"],
            intermediate_size=d["intermediate_size"],
            num_hidden_layers=d["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=d.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope_theta),
            max_position_embeddings=d.get("max_position_embeddings", 40960),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            dtype=dtype,
            bos_token_id=d.get("bos_token_id"),
            eos_token_ids=eos_ids,
        )

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> Qwen3Config:
        path = Path(model_dir) / "config.json"
        if not path.is_file():
            raise CheckpointError(f"{model_dir}: no config.json")
        try:
            data = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise CheckpointError(f"{path}: not valid JSON ({err})") from None
        if not isinstance(data, dict):
            raise CheckpointError(f"{path}: expected a JSON object")
        return cls.from_hf_dict(data, source=str(path))

    def to_hf_dict(self) -> dict[str, Any]:
        """The transformers-5 layout (`rope_parameters`, `dtype`), loadable by transformers."""
        d = asdict(self)
        eos = d.pop("eos_token_ids")
        d["eos_token_id"] = (eos[0] if len(eos) == 1 else list(eos)) if eos else None
        d["rope_parameters"] = {"rope_type": "default", "rope_theta": d.pop("rope_theta")}
        d.update(
            architectures=["Qwen3ForCausalLM"],
            model_type="qwen3",
            hidden_act="silu",
            attention_bias=False,
            attention_dropout=0.0,
            use_sliding_window=False,
            sliding_window=None,
            use_cache=True,
        )
        return d


def _rope_theta(d: dict[str, Any], source: str) -> float:
    params = d.get("rope_parameters")
    scaling = d.get("rope_scaling")
    if isinstance(params, dict):
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type != "default":
            raise CheckpointError(
                f"{source}: unsupported rope_parameters.rope_type {rope_type!r} "
                "(only plain RoPE is supported)"
            )
        theta = params.get("rope_theta", d.get("rope_theta"))
    else:
        if params is not None:
            raise CheckpointError(f"{source}: rope_parameters must be an object")
        theta = d.get("rope_theta")
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else None
        if kind != "default":
            raise CheckpointError(
                f"{source}: unsupported rope_scaling {kind or scaling!r} "
                "(only plain RoPE is supported)"
            )
    if theta is None:
        theta = 10000.0  # transformers' default when the key is absent
    if not isinstance(theta, (int, float)) or isinstance(theta, bool):
        raise CheckpointError(f"{source}: rope_theta must be a number, got {theta!r}")
    return float(theta)
