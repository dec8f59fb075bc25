"""RoPE as a checkpoint describes it: the base frequency and an optional scaling rule.

Read from config.json in either layout, as transformers reads them:
  * legacy (transformers 4.x / the hub): top-level `rope_theta`, `rope_scaling: {rope_type |
    type, factor, ...}` or null;
  * transformers 5.x: `rope_parameters: {rope_type, rope_theta, factor, ...}`.
`rope_scaling` wins over `rope_parameters` when both are set (transformers reads it first).

Supported rules (what changes is the table of inverse frequencies only, built in
ops/rope.py `inverse_frequencies`; the attention scaling stays 1 for each):
  * `default`: inv_freq_i = theta ** (-2i / D);
  * `linear`: inv_freq / factor;
  * `llama3` (Llama-3.1/3.2): low frequencies divided by `factor`, high ones kept, a smooth
    blend between, set by `low_freq_factor`, `high_freq_factor` and
    `original_max_position_embeddings`.
Anything else (`dynamic`, `yarn`, `longrope`, partial rotary factors) is refused in one line
naming the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from evokernel.errors import CheckpointError

ROPE_TYPES = ("default", "linear", "llama3")
LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


@dataclass(frozen=True)
class RopeScaling:
    """A scaling rule on top of the base frequencies (None fields do not apply to the rule)."""

    rope_type: str  # "linear" | "llama3"
    factor: float
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    original_max_position_embeddings: int | None = None

    def __post_init__(self) -> None:
        if self.rope_type not in ROPE_TYPES[1:]:
            raise CheckpointError(f"config: unsupported rope_type {self.rope_type!r}")
        numbers: list[object] = [self.factor]
        if self.rope_type == "llama3":
            numbers += [self.low_freq_factor, self.high_freq_factor]
            numbers.append(self.original_max_position_embeddings)
        for value in numbers:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not (ok and math.isfinite(value) and value > 0):  # type: ignore[operator,arg-type]
                raise CheckpointError(
                    f"config: rope scaling ({self.rope_type}) needs finite positive "
                    f"{', '.join(LLAMA3_KEYS if self.rope_type == 'llama3' else ('factor',))}"
                    f", got {value!r}"
                )
        if self.rope_type == "llama3":
            assert self.low_freq_factor is not None and self.high_freq_factor is not None
            if self.high_freq_factor <= self.low_freq_factor:
                raise CheckpointError(
                    "config: llama3 rope scaling needs high_freq_factor > low_freq_factor"
                )

    def to_hf(self) -> dict[str, Any]:
        d: dict[str, Any] = {"rope_type": self.rope_type, "factor": self.factor}
        if self.rope_type == "llama3":
            d |= {
                "low_freq_factor": self.low_freq_factor,
                "high_freq_factor": self.high_freq_factor,
                "original_max_position_embeddings": self.original_max_position_embeddings,
            }
        return d


def parse_rope(d: dict[str, Any], source: str) -> tuple[float, RopeScaling | None]:
    """(rope_theta, scaling or None) from a config dict in either layout."""
    for key in ("rope_scaling", "rope_parameters"):
        params = d.get(key)
        if params is not None and not isinstance(params, dict):
            raise CheckpointError(f"{source}: {key} must be an object or null, got {params!r}")
        if params:
            break
    else:
        key, params = "rope_parameters", {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise CheckpointError(
            f"{source}: unsupported {key}.rope_type {rope_type!r} "
            f"(supported: {', '.join(ROPE_TYPES)})"
        )
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise CheckpointError(
            f"{source}: unsupported {key}.partial_rotary_factor "
            f"{params['partial_rotary_factor']!r} (only full-head RoPE is supported)"
        )
    theta = params.get("rope_theta", d.get("rope_theta"))
    if theta is None:
        theta = 10000.0  # transformers' default when the key is absent
    if not isinstance(theta, (int, float)) or isinstance(theta, bool):
        raise CheckpointError(f"{source}: rope_theta must be a number, got {theta!r}")
    theta = to_float(theta, "rope_theta", source)
    if rope_type == "default":
        return theta, None
    fields: dict[str, Any] = {"factor": params.get("factor")}
    if rope_type == "llama3":
        fields |= {k: params.get(k) for k in LLAMA3_KEYS[1:]}
    try:
        return theta, RopeScaling(rope_type, **fields)
    except CheckpointError as err:
        raise CheckpointError(f"{source}: {key}: {str(err).removeprefix('config: ')}") from None


def to_float(value: int | float, key: str, source: str) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer beyond float range (JSON has no size limit)
        raise CheckpointError(f"{source}: {key} is out of range for a float") from None
