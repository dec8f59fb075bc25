"""EVOLVE-BLOCK regions and declared tuning knobs in a candidate's source.

A candidate holds exactly one evolvable region::

    # EVOLVE-BLOCK-START
    BLOCK_N = 64  # tune: 16, 32, 64, 128
    ...
    # EVOLVE-BLOCK-END

Everything outside the region is fixed: an edit that changes it is rejected with a reason that
goes into the next prompt. A knob is a module-level assignment inside the region whose trailing
`# tune:` comment lists the legal values as comma-separated Python literals; the offline mutator
and the exhaustive search move knobs only among those values.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

START = "# EVOLVE-BLOCK-START"
END = "# EVOLVE-BLOCK-END"

_KNOB = re.compile(
    r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>[^#]+?)\s*#\s*tune:\s*(?P<choices>.+?)\s*$"
)


class BlockError(ValueError):
    """The source's EVOLVE-BLOCK markers are missing, repeated or out of order."""


@dataclass(frozen=True)
class Block:
    """Line span of the region: `lines[start]` is the START marker, `lines[end]` the END."""

    start: int
    end: int

    def body(self, source: str) -> str:
        return "\n".join(source.splitlines()[self.start + 1 : self.end])


@dataclass(frozen=True)
class Knob:
    name: str
    value: Any
    choices: tuple[Any, ...]
    line: int  # 0-based line index in the source


def find_block(source: str) -> Block:
    lines = source.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == START]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(starts) != 1 or len(ends) != 1:
        raise BlockError(
            f"expected exactly one '{START}' and one '{END}' line, "
            f"found {len(starts)} and {len(ends)}"
        )
    if starts[0] >= ends[0]:
        raise BlockError(f"'{END}' comes before '{START}'")
    return Block(starts[0], ends[0])


def outside(source: str) -> tuple[list[str], list[str]]:
    """The fixed lines before and after the region (markers included)."""
    block = find_block(source)
    lines = source.splitlines()
    return lines[: block.start + 1], lines[block.end :]


def check_edit(parent: str, child: str) -> str | None:
    """None when `child` changes only the parent's EVOLVE-BLOCK; else a one-line reason."""
    try:
        before_p, after_p = outside(parent)
    except BlockError as err:
        return f"parent has malformed EVOLVE-BLOCK markers: {err}"
    try:
        before_c, after_c = outside(child)
    except BlockError as err:
        return f"malformed EVOLVE-BLOCK markers: {err}"
    for label, old, new in (("before", before_p, before_c), ("after", after_p, after_c)):
        if [s.rstrip() for s in old] != [s.rstrip() for s in new]:
            first = next(
                (i for i, (a, b) in enumerate(zip(old, new)) if a.rstrip() != b.rstrip()),
                min(len(old), len(new)),
            )
            line = new[first].strip() if first < len(new) else "<end of file>"
            return f"edit outside the EVOLVE-BLOCK ({label} it), at: {line[:80]!r}"
    return None


def replace_block(source: str, new_body: str) -> str:
    """`source` with the region's body replaced by `new_body` (markers kept)."""
    before, after = outside(source)
    body = new_body.strip("\n").splitlines()
    return "\n".join([*before, *body, *after]) + "\n"


def parse_knobs(source: str) -> list[Knob]:
    """Declared knobs inside the region, in source order. Malformed declarations raise
    `BlockError` naming the line, so a seed with a typo fails loudly."""
    block = find_block(source)
    knobs: list[Knob] = []
    for i, line in enumerate(source.splitlines()[block.start + 1 : block.end], block.start + 1):
        m = _KNOB.match(line)
        if not m:
            continue
        try:
            value = ast.literal_eval(m["value"].strip())
            choices = ast.literal_eval(f"({m['choices']},)")
        except (ValueError, SyntaxError) as err:
            msg = f"line {i + 1}: bad tune declaration ({err}): {line.strip()}"
            raise BlockError(msg) from None
        if value not in choices:
            raise BlockError(f"line {i + 1}: value {value!r} of {m['name']} not in its choices")
        if any(k.name == m["name"] for k in knobs):
            raise BlockError(f"line {i + 1}: knob {m['name']} declared twice")
        knobs.append(Knob(m["name"], value, tuple(choices), i))
    return knobs


def set_knobs(source: str, values: dict[str, Any]) -> str:
    """`source` with the named knobs set (each value must be among its declared choices)."""
    knobs = {k.name: k for k in parse_knobs(source)}
    lines = source.splitlines()
    for name, value in values.items():
        knob = knobs.get(name)
        if knob is None:
            raise BlockError(f"no knob named {name!r}")
        if value not in knob.choices:
            raise BlockError(f"{value!r} is not a declared choice of {name}: {knob.choices}")
        line = lines[knob.line]
        m = _KNOB.match(line)
        assert m is not None
        lines[knob.line] = line[: m.start("value")] + repr(value) + line[m.end("value") :]
    return "\n".join(lines) + ("\n" if source.endswith("\n") else "")


def knob_values(source: str) -> dict[str, Any]:
    return {k.name: k.value for k in parse_knobs(source)}
