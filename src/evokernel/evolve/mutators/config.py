"""Configuration of the offline mutator and of the prompts: `mutators.offline` and
`mutators.prompt` in the search's YAML. Every key, with its default::

    mutators:
      offline:
        transform_prob: 0.25   # chance a child comes from a source transformation (when one
                               #   applies and is new) instead of moving knobs
        two_knobs_prob: 0.3    # chance a knob child moves two knobs instead of one
        jump_prob: 0.2         # chance a moved knob jumps to any other declared value instead
                               #   of a neighbouring one
        max_attempts: 64       # random draws before enumerating the unseen settings in order
        model_prob: 0.75       # chance a knob child is the untried setting an additive model of
                               #   the run's measured fitness ranks first (knob_model.py)
        edit_prob: 0.15        # chance a child is a source edit (edits.py: constants, operators,
                               #   statements, conditions, loops) when knobs could move; a
                               #   program without movable knobs is edited every time
        transforms: [exp2, evict_first, evict_last, cache_modifier, contiguity_hints,
                     drop_contiguity_hints]   # the transformations it may apply
      prompt:
        max_chars: 60000             # whole user prompt; sections shrink in a fixed order
        max_fixed_code_chars: 12000  # code outside the EVOLVE-BLOCK (the block is never cut)
        max_inspiration_chars: 6000  # each inspiration's block
        max_artifact_chars: 3000     # each evaluator artifact (stderr tail, profiler list)
        max_insights: 16             # newest insight lines shown
        template_dir: null           # a directory of .txt templates overriding the built-in ones
        system_message: null         # a text replacing the system template (OpenEvolve's key)
        include_artifacts: true      # the parent's evaluator artifacts go into the prompt

Which mutators run, and how often, is the core's `mutators.weights` (offline, llm_diff,
llm_rewrite, crossover).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evokernel.evolve.mutators.transforms import TRANSFORMS
from evokernel.evolve.sections import build_section, require

MAX_CHARS = 10_000_000  # a prompt limit beyond any model's context window is a typo


def _prob(name: str, value: Any) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
    require(ok, f"{name} must be a probability in [0, 1], got {value!r}")


@dataclass(frozen=True)
class OfflineConfig:
    transform_prob: float = 0.25
    two_knobs_prob: float = 0.3
    jump_prob: float = 0.2
    max_attempts: int = 64
    transforms: list[str] = field(default_factory=lambda: list(TRANSFORMS))
    model_prob: float = 0.75
    edit_prob: float = 0.15

    def __post_init__(self) -> None:
        for name in ("transform_prob", "two_knobs_prob", "jump_prob", "model_prob", "edit_prob"):
            _prob(name, getattr(self, name))
        require(
            self.transform_prob + self.edit_prob <= 1,
            "transform_prob + edit_prob must be at most 1",
        )
        require(
            isinstance(self.max_attempts, int) and 1 <= self.max_attempts <= 100_000,
            "max_attempts must be in [1, 100000]",
        )
        unknown = [t for t in self.transforms if t not in TRANSFORMS]
        require(not unknown, f"transforms: unknown {unknown} (known: {list(TRANSFORMS)})")

    @classmethod
    def from_dict(cls, data: Any, where: str = "mutators.offline") -> OfflineConfig:
        return build_section(cls, data, where)


@dataclass(frozen=True)
class PromptConfig:
    max_chars: int = 60000
    max_fixed_code_chars: int = 12000
    max_inspiration_chars: int = 6000
    max_artifact_chars: int = 3000
    max_insights: int = 16
    template_dir: str | None = None  # a directory of .txt files overriding built-in templates
    system_message: str | None = None  # replaces the system template's text (OpenEvolve's key)
    include_artifacts: bool = True  # show the parent's evaluator artifacts in the prompt

    def __post_init__(self) -> None:
        for name in (
            "max_chars",
            "max_fixed_code_chars",
            "max_inspiration_chars",
            "max_artifact_chars",
        ):
            value = getattr(self, name)
            require(
                isinstance(value, int) and 200 <= value <= MAX_CHARS,
                f"{name} must be in [200, {MAX_CHARS}]",
            )
        require(
            isinstance(self.max_insights, int) and 0 <= self.max_insights <= 10_000,
            "max_insights must be in [0, 10000]",
        )
        if self.template_dir is not None:
            # Stored as an absolute path: a resumed run reads the same templates from any
            # working directory.
            path = Path(os.path.expanduser(self.template_dir))
            require(path.is_dir(), f"template_dir: no such directory: {self.template_dir}")
            object.__setattr__(self, "template_dir", str(path.resolve()))

    @classmethod
    def from_dict(cls, data: Any, where: str = "mutators.prompt") -> PromptConfig:
        return build_section(cls, data, where)
