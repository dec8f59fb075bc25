"""Builds the chat prompt of an LLM mutation from a `MutationContext`.

Anatomy (each section a `string.Template` text file in this package, `$name` placeholders):

  system.txt       the role and how an answer is judged (EVOLVE-BLOCK rule, imports, hidden
                   correctness checks, honest timing, knobs, one change at a time)
  task.txt         task name, description, interface; hardware facts (GPU, measured copy
                   bandwidth, what the roofline means)
  parent.txt       the current program (whole file) and its measurements: per scenario the
                   shape, bytes moved, roofline time, median time, baseline, speedup [95% CI],
                   % of roofline and flags, or why it is incorrect
  artifacts.txt    the evaluator's artifacts (stderr/compiler tail, profiler kernel list)
  failure.txt      why the parent's last child was rejected
  inspirations.txt other programs (EVOLVE-BLOCKs only) with their speedups
  insights.txt     what earlier changes did to the measured speedup, newest last
  diff.txt | rewrite.txt | crossover.txt   the answer format of the mode

Size: the user prompt is kept under `PromptConfig.max_chars` by shrinking, in order: the
inspirations (last first), the insights (oldest first), the artifacts, the fixed code outside
the block. The EVOLVE-BLOCK itself is never cut (SEARCH texts must match it exactly).
Deterministic: the same context gives the same prompt.
"""

from __future__ import annotations

import string
from collections.abc import Iterator
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from evokernel.errors import ConfigError
from evokernel.evaluate.result import EvalResult
from evokernel.evolve.llm.client import prompt_text
from evokernel.evolve.mutators.config import PromptConfig
from evokernel.evolve.prompts.stages import stage_breakdown
from evokernel.evolve.types import MutationContext, ProgramView
from evokernel.tasks.blocks import BlockError, find_block, find_regions

MODES = ("diff", "rewrite", "crossover")
_MAX_REASONS = 6


@dataclass(frozen=True)
class Prompt:
    system: str
    user: str

    @property
    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]

    @property
    def text(self) -> str:
        return prompt_text(self.messages)


def clip(text: str, limit: int, keep: str = "head") -> str:
    """`text` cut to about `limit` characters at line boundaries, saying what was cut."""
    if len(text) <= limit:
        return text
    lines = text.split("\n")
    kept: list[str] = []
    size = 0
    for line in lines if keep == "head" else reversed(lines):
        if size + len(line) + 1 > limit and kept:
            break
        kept.append(line[:limit])
        size += len(line) + 1
    note = f"[... {len(lines) - len(kept)} more lines cut ...]"
    return "\n".join([*kept, note]) if keep == "head" else "\n".join([note, *reversed(kept)])


def program_label(p: ProgramView) -> str:
    fit = f"fitness {p.fitness:.3f}" if p.fitness is not None else "no fitness"
    state = "correct" if p.correct else "incorrect"
    return f"id {p.id}, generation {p.generation}, made by {p.mutation}, {state}, {fit}"


def speedup_summary(result: EvalResult | None) -> str:
    if result is None or not result.scenarios:
        return "no timings"
    parts = [
        f"{s.name} {s.speedup:.3f}x" if s.speedup is not None else f"{s.name} -"
        for s in result.scenarios
    ]
    return ", ".join(parts)


def figures(result: EvalResult | None) -> str:
    if result is None:
        return "Not measured."
    if not result.correct:
        reasons = "\n".join(f"- {r}" for r in result.reasons[:_MAX_REASONS])
        return f"INCORRECT (stage {result.stage}):\n{reasons}"
    if not result.scenarios:
        return f"Correct on every check. Timing: {result.timing_label}."
    rows = [
        "| scenario | regime | shape | bytes moved | roofline us | ours us (median) "
        "| baseline us | speedup [95% CI] | % roofline | flags |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in result.scenarios:
        shape = " ".join(f"{k}={v}" for k, v in s.params.items())
        base = s.baselines.get(s.baseline)
        base_txt = f"{s.baseline} {base.median_us:.2f}" if base else s.baseline
        if s.speedup is None:
            sp = "-"
        elif s.speedup_ci:
            sp = f"{s.speedup:.3f} [{s.speedup_ci[0]:.3f}, {s.speedup_ci[1]:.3f}]"
        else:
            sp = f"{s.speedup:.3f}"
        rows.append(
            f"| {s.name} | {s.regime} | {shape} | {s.bytes_moved} | {s.roofline_us:.2f} "
            f"| {s.candidate.median_us:.2f} | {base_txt} | {sp} | {s.pct_roofline:.1f}% "
            f"| {', '.join(s.flags)} |"
        )
    return f"Correct on every check. Timing: {result.timing_label}.\n" + "\n".join(rows)


def hardware(ctx: MutationContext) -> str:
    hw = ctx.hardware
    dev = ctx.parent.result.device if ctx.parent.result else None
    gpu = hw.get("gpu") or (dev.name if dev and dev.kind == "cuda" else "")
    lines = [f"- GPU: {gpu or 'a modern NVIDIA GPU (not named)'}"]
    sms = hw.get("sm_count") or (dev.sm_count if dev else 0)
    l2 = hw.get("l2_bytes") or (dev.l2_bytes if dev else 0)
    if sms or l2:
        lines.append(f"- {sms} SMs, L2 cache {l2 / 2**20:.0f} MiB")
    gbps = hw.get("copy_gbps") or (dev.copy_gbps if dev else 0.0)
    if gbps:
        lines.append(
            f"- measured device-to-device copy bandwidth: {gbps:.0f} GB/s (read + write bytes). "
            "A scenario's roofline time is its minimal bytes moved divided by this bandwidth."
        )
    if ctx.device == "cpu":
        lines.append(
            "- This search runs on the Triton CPU interpreter: its measurements prove "
            "correctness only. Optimise for the GPU."
        )
    if hw.get("notes"):
        lines.append(f"- {hw['notes']}")
    return "\n".join(lines)


def block_of(code: str) -> str:
    """The evolvable text: the region's body, several regions' bodies one after the other, or
    the whole file when it has no markers."""
    try:
        return "\n\n".join(region.body(code) for region in find_regions(code))
    except BlockError:
        return code


def _fixed_clipped(code: str, limit: int) -> str:
    """The whole file with the fixed code around the block cut to `limit` characters."""
    try:
        block = find_block(code)
    except BlockError:
        return code
    lines = code.splitlines()
    before = "\n".join(lines[: block.start])
    after = "\n".join(lines[block.end + 1 :])
    if len(before) + len(after) > limit:
        before = clip(before, limit // 2, "head")
        after = clip(after, limit // 2, "head")
    inner = "\n".join(lines[block.start : block.end + 1])
    return "\n".join(p for p in (before, inner, after) if p)


@dataclass(frozen=True)
class _Sizes:
    inspirations: int
    insights: int
    artifact_chars: int
    fixed_chars: int


def _shrinking(sizes: _Sizes) -> Iterator[_Sizes]:
    """Ever smaller section sizes, in the order the module docstring gives."""
    s = sizes
    while s.inspirations:
        s = replace(s, inspirations=s.inspirations - 1)
        yield s
    while s.insights:
        s = replace(s, insights=s.insights // 2)
        yield s
    s = replace(s, artifact_chars=min(s.artifact_chars, 400))
    yield s
    yield replace(s, fixed_chars=min(s.fixed_chars, 400))


TEMPLATES = (
    "system",
    "task",
    "parent",
    "artifacts",
    "failure",
    "inspirations",
    "insights",
    *MODES,
)


def _overrides(template_dir: str | None) -> dict[str, str]:
    """The `.txt` files of `template_dir`, read now, so that a misnamed or unreadable file is
    a configuration error at start-up, not a failure of every proposal."""
    if not template_dir:
        return {}
    texts = {}
    for path in sorted(Path(template_dir).glob("*.txt")):
        if path.stem not in TEMPLATES:
            raise ConfigError(
                f"mutators.prompt.template_dir: {path.name} is not a template name "
                f"(known: {', '.join(t + '.txt' for t in TEMPLATES)})"
            )
        try:
            texts[path.stem] = path.read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"mutators.prompt.template_dir: cannot read {path}: {err}") from None
    return texts


class PromptBuilder:
    def __init__(self, config: PromptConfig | None = None) -> None:
        self.config = config or PromptConfig()
        self._texts = _overrides(self.config.template_dir)
        self._templates: dict[str, string.Template] = {}

    def template(self, name: str) -> string.Template:
        if name not in self._templates:
            text = self._texts.get(name)
            if text is None:
                text = resources.files(__package__).joinpath(f"{name}.txt").read_text()
            self._templates[name] = string.Template(text)
        return self._templates[name]

    def _fill(self, name: str, **values: str) -> str:
        return self.template(name).safe_substitute(values).strip()

    def build(self, ctx: MutationContext, mode: str, other: ProgramView | None = None) -> Prompt:
        if mode not in MODES:
            raise ValueError(f"unknown prompt mode {mode!r} (known: {MODES})")
        if mode == "crossover" and other is None:
            raise ValueError("a crossover prompt needs the second program")
        cfg = self.config
        sizes = _Sizes(
            len(ctx.inspirations),
            cfg.max_insights,
            cfg.max_artifact_chars,
            cfg.max_fixed_code_chars,
        )
        user = self._user(ctx, mode, other, sizes)
        for smaller in _shrinking(sizes):
            if len(user) <= cfg.max_chars:
                break
            user = self._user(ctx, mode, other, smaller)
        system = self.config.system_message
        return Prompt(system.strip() if system else self._fill("system"), user)

    def _user(
        self, ctx: MutationContext, mode: str, other: ProgramView | None, sizes: _Sizes
    ) -> str:
        parent = ctx.parent
        parts = [
            self._fill(
                "task",
                task_name=ctx.task_name,
                task_description=ctx.task_description.strip(),
                task_interface=ctx.task_interface.strip(),
                hardware=hardware(ctx),
            ),
            self._fill(
                "parent",
                program_label=program_label(parent),
                code=_fixed_clipped(parent.code, sizes.fixed_chars),
                figures=figures(parent.result),
            ),
        ]
        artifacts = parent.result.artifacts if parent.result else {}
        if artifacts and self.config.include_artifacts:
            size = sizes.artifact_chars
            text = "\n\n".join(
                f"### {_title(key)}\n```\n{clip(_shown(key, val), size, _keep(key))}\n```"
                for key, val in sorted(artifacts.items())
                if val.strip()
            )
            if text:
                parts.append(self._fill("artifacts", artifacts=text))
        if ctx.last_failure:
            failure = clip(ctx.last_failure.strip(), self.config.max_artifact_chars, "tail")
            parts.append(self._fill("failure", failure=failure))
        shown = [p for p in ctx.inspirations if other is None or p.id != other.id]
        if shown[: sizes.inspirations]:
            text = "\n\n".join(
                f"### {program_label(p)}\nspeedups: {speedup_summary(p.result)}\n"
                f"```python\n{clip(block_of(p.code), self.config.max_inspiration_chars)}\n```"
                for p in shown[: sizes.inspirations]
            )
            parts.append(self._fill("inspirations", inspirations=text))
        insights = ctx.insights[-sizes.insights :] if sizes.insights else []
        if insights:
            text = "\n".join(f"- {' '.join(line.split())}" for line in insights)
            parts.append(self._fill("insights", insights=text))
        if mode == "crossover" and other is not None:
            parts.append(
                self._fill(
                    "crossover",
                    other_label=program_label(other),
                    other_block=block_of(other.code),
                    other_figures=figures(other.result),
                )
            )
        else:
            parts.append(self._fill(mode))
        return "\n\n".join(parts) + "\n"


def _shown(key: str, value: str) -> str:
    """An artifact as the prompt shows it: the profiler's kernel list as a per-stage breakdown
    (prompts/stages.py), anything else as it is."""
    if key == "kernels":
        return stage_breakdown(value) or value.strip()
    return value.strip()


def _title(key: str) -> str:
    if key == "kernels":
        return "kernels (per-stage device time of one call, per scenario)"
    return key.removeprefix("artifact:")


def _keep(key: str) -> str:
    return "head" if "profil" in key.lower() or "kernel" in key.lower() else "tail"
