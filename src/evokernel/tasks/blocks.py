"""EVOLVE-BLOCK regions and declared tuning knobs in a candidate's source.

A kernel candidate holds exactly one evolvable region (`find_block`)::

    # EVOLVE-BLOCK-START
    BLOCK_N = 64  # tune: 16, 32, 64, 128
    ...
    # EVOLVE-BLOCK-END

A generic (OpenEvolve-style) program may hold several regions, each evolvable, or none: then
the whole file is one region (`find_regions`; the region's `start` is -1 and its `end` the
number of lines). `check_edit`, `parse_knobs` and the knob helpers work on every region.

Everything outside the regions is fixed: an edit that changes it is rejected with a reason that
goes into the next prompt. A knob is a module-level assignment inside the region whose trailing
`# tune:` comment lists the legal values as comma-separated Python literals; the offline mutator
and the exhaustive search move knobs only among those values.

Contracts:
  * A marker is a line that equals `# EVOLVE-BLOCK-START` / `# EVOLVE-BLOCK-END` once leading
    and trailing whitespace is stripped (indented markers and CRLF line ends are fine).
  * Markers alternate START, END, START, END; a missing, extra, nested or misspelled one is a
    `BlockError` naming the lines.
  * `check_edit` ignores line-end style, trailing whitespace and trailing blank lines at the end
    of the file; any other difference outside the region is an edit outside the block.
  * `replace_block` keeps the source's line-end style and indents a flush-left body to an
    indented marker's depth; `replace_block(src, find_block(src).body(src))` is `src` (with a
    final line end).
  * A `# tune:` comment inside the region that is not a well-formed module-level knob raises
    `BlockError` naming the line, so a seed with a typo fails loudly.
  * Knob choices are ordered: the declared order defines "neighbouring" values.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evokernel import pysource

START = "# EVOLVE-BLOCK-START"
END = "# EVOLVE-BLOCK-END"

# Linear on any line (each part stops where the next one's first character starts; values and
# choices are stripped in code): a knob line comes from candidate code, and a pattern with
# overlapping `\s*`/lazy parts took minutes on a 10 KB line of spaces.
_KNOB = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?::[^=#]+)?=(?P<value>[^#]*)#\s*tune:(?P<choices>.*)"
)
_TUNE_COMMENT = re.compile(r"#\s*tune:")
_NEAR_MARKER = re.compile(r"EVOLVE[-_ ]?BLOCK", re.IGNORECASE)
# A comment that starts like a marker (a mention elsewhere in a line or a string is not one).
_MARKER_COMMENT = re.compile(r"#+\s*EVOLVE[-_ ]?BLOCK", re.IGNORECASE)


class BlockError(ValueError):
    """The source's EVOLVE-BLOCK markers are missing, repeated or out of order, or a knob
    declaration is malformed."""


@dataclass(frozen=True)
class Block:
    """Line span of the region: `lines[start]` is the START marker, `lines[end]` the END.
    `indent` is the START marker's leading whitespace."""

    start: int
    end: int
    indent: str = ""

    def body(self, source: str) -> str:
        return "\n".join(source.splitlines()[self.start + 1 : self.end])


@dataclass(frozen=True)
class Knob:
    name: str
    value: Any
    choices: tuple[Any, ...]
    line: int  # 0-based line index in the source


def newline_of(source: str) -> str:
    """The source's line-end style: CRLF when its first line ends so, else LF."""
    first = source.find("\n")
    return "\r\n" if first > 0 and source[first - 1] == "\r" else "\n"


def find_block(source: str) -> Block:
    """The one region of a kernel candidate; anything but exactly one is a `BlockError`."""
    lines = source.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == START]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(starts) != 1 or len(ends) != 1:
        detail = (
            f"expected exactly one '{START}' and one '{END}' line, "
            f"found {len(starts)} (lines {_numbers(starts)}) and {len(ends)} "
            f"(lines {_numbers(ends)})"
        )
        raise BlockError(detail + _near_marker(lines, starts + ends))
    if starts[0] >= ends[0]:
        raise BlockError(
            f"'{END}' (line {ends[0] + 1}) comes before '{START}' (line {starts[0] + 1})"
        )
    marker = lines[starts[0]]
    return Block(starts[0], ends[0], marker[: len(marker) - len(marker.lstrip())])


def find_regions(source: str) -> list[Block]:
    """Every region in order: the EVOLVE-BLOCKs, or the whole file when there is no marker."""
    lines = source.splitlines()
    marks = [(i, line.strip()) for i, line in enumerate(lines) if line.strip() in (START, END)]
    if not marks:
        near = _near_marker(lines, [])
        if near:
            raise BlockError("no EVOLVE-BLOCK marker" + near)
        return [Block(-1, len(lines))]
    regions: list[Block] = []
    for n, (i, kind) in enumerate(marks):
        want = START if n % 2 == 0 else END
        if kind != want:
            prev = f" after the {'START' if want == END else 'END'} on line {marks[n - 1][0] + 1}"
            raise BlockError(
                f"line {i + 1}: '{kind}' where '{want}' was expected"
                f"{prev if n else ''} (markers must alternate START, END)"
            )
        if kind == END:
            start = marks[n - 1][0]
            marker = lines[start]
            regions.append(Block(start, i, marker[: len(marker) - len(marker.lstrip())]))
    if len(marks) % 2:
        raise BlockError(f"the '{START}' on line {marks[-1][0] + 1} has no '{END}'")
    near = _near_marker(lines, [i for i, _ in marks])
    if near:
        raise BlockError("malformed marker" + near)
    return regions


def _near_marker(lines: list[str], exact: list[int]) -> str:
    near = [i for i, line in enumerate(lines) if _NEAR_MARKER.search(line) and i not in exact]
    near = [i for i in near if _MARKER_COMMENT.match(lines[i].strip())]
    if not near:
        return ""
    return f"; line {near[0] + 1} looks like a marker but is not exact: " + repr(
        lines[near[0]].strip()[:60]
    )


def _numbers(idx: list[int]) -> str:
    return ", ".join(str(i + 1) for i in idx) or "-"


def outside(source: str) -> tuple[list[str], list[str]]:
    """The fixed lines before and after the one region (markers included)."""
    block = find_block(source)
    lines = source.splitlines()
    return lines[: block.start + 1], lines[block.end :]


def fixed_parts(source: str) -> list[list[str]]:
    """The fixed lines around and between the regions, markers included: one list more than
    there are regions (both empty for a whole-file program)."""
    lines = source.splitlines()
    parts, at = [], 0
    for block in find_regions(source):
        parts.append(lines[at : block.start + 1])
        at = max(block.end, 0) if block.start >= 0 else len(lines)
    parts.append(lines[at:])
    return parts


def check_edit(parent: str, child: str) -> str | None:
    """None when `child` changes only the parent's regions; else a one-line reason."""
    try:
        old_parts = fixed_parts(parent)
    except BlockError as err:
        return f"parent has malformed EVOLVE-BLOCK markers: {err}"
    try:
        new_parts = fixed_parts(child)
    except BlockError as err:
        return f"malformed EVOLVE-BLOCK markers: {err}"
    if len(old_parts) != len(new_parts) or (
        len(old_parts) == 2 and bool(old_parts[0]) != bool(new_parts[0])
    ):
        had, has = _region_count(old_parts), _region_count(new_parts)
        return f"the parent has {had} EVOLVE-BLOCK(s), the child {has}: markers may not change"
    child_lines = child.splitlines()
    offsets = _offsets(child_lines, new_parts)
    count = len(old_parts) - 1
    for n, (old, new) in enumerate(zip(old_parts, new_parts)):
        old_n, new_n = _normalized(old), _normalized(new)
        if old_n == new_n:
            continue
        label = "before it" if n == 0 else "after it" if n == count else f"between blocks {n}"
        if count > 1 and n in (0, count):
            label = "before the first" if n == 0 else "after the last"
        first = next(
            (i for i, (a, b) in enumerate(zip(old_n, new_n)) if a != b),
            min(len(old_n), len(new_n)),
        )
        if first < len(new_n):
            where = f"line {offsets[n] + first + 1}: {new_n[first].strip()[:80]!r}"
        else:
            missing = next((s.strip()[:80] for s in old_n[first:] if s.strip()), "")
            where = f"end of file (fixed line {missing!r} is missing)"
        return f"edit outside the EVOLVE-BLOCK ({label}), at {where}"
    return None


def _region_count(parts: list[list[str]]) -> str:
    return "no" if len(parts) == 2 and not parts[0] else str(len(parts) - 1)


def _offsets(lines: list[str], parts: list[list[str]]) -> list[int]:
    """The line index where each fixed part starts in `lines`."""
    regions = find_regions("\n".join(lines))
    starts = [0]
    for block in regions:
        starts.append(max(block.end, 0) if block.start >= 0 else len(lines))
    return starts[: len(parts)]


def _normalized(lines: list[str]) -> list[str]:
    out = [s.rstrip() for s in lines]
    while out and not out[-1]:
        out.pop()
    return out


def replace_block(source: str, new_body: str) -> str:
    """`source` with the one region's body replaced by `new_body` (markers kept)."""
    return _replace(source, find_block(source), new_body)


def replace_region(source: str, index: int, new_body: str) -> str:
    """`source` with region `index` (of `find_regions`) replaced by `new_body`."""
    return _replace(source, find_regions(source)[index], new_body)


def _replace(source: str, block: Block, new_body: str) -> str:
    lines = source.splitlines()
    text = new_body.replace("\r\n", "\n")
    body = (text[:-1] if text.endswith("\n") else text).split("\n") if text else []
    if block.indent and body and not any(ln.startswith(block.indent) for ln in body if ln.strip()):
        body = [block.indent + ln if ln.strip() else ln for ln in body]
    nl = newline_of(source)
    return nl.join([*lines[: block.start + 1], *body, *lines[block.end :]]) + nl


def region_lines(source: str) -> list[tuple[int, int]]:
    """Each region's body as a 0-based half-open line range `[first, last)`."""
    return [(b.start + 1, b.end) for b in find_regions(source)]


def _knob_line(line: str) -> re.Match[str] | None:
    """The match of a knob declaration (`name[: type] = value  # tune: choices`, value and
    choices not blank), or None."""
    m = _KNOB.fullmatch(line)
    return m if m and m["value"].strip() and m["choices"].strip() else None


def knob_value_span(line: str) -> tuple[int, int] | None:
    """Where the value of a knob declaration line is (without the spaces around it), or None
    for a line that declares no knob."""
    m = _knob_line(line)
    if m is None:
        return None
    value = m["value"]
    lo = m.start("value") + len(value) - len(value.lstrip())
    return lo, lo + len(value.strip())


def parse_knobs(source: str) -> list[Knob]:
    """Declared knobs inside the regions, in source order. Malformed declarations raise
    `BlockError` naming the line, so a seed with a typo fails loudly."""
    knobs: list[Knob] = []
    lines = source.splitlines()
    for i in (i for lo, hi in region_lines(source) for i in range(lo, hi)):
        line = lines[i]
        m = _knob_line(line)
        if not m:
            if _TUNE_COMMENT.search(line) and line.split("#", 1)[0].strip():
                raise BlockError(
                    f"line {i + 1}: '# tune:' on a line that is not a module-level "
                    f"assignment: {line.strip()[:80]}"
                )
            continue
        try:
            value = pysource.literal_eval(m["value"].strip())
            choices = pysource.literal_eval(f"({m['choices'].strip()},)")
        except (ValueError, SyntaxError) as err:
            msg = f"line {i + 1}: bad tune declaration ({err}): {line.strip()}"
            raise BlockError(msg) from None
        if value not in choices:
            raise BlockError(f"line {i + 1}: value {value!r} of {m['name']} not in its choices")
        if len(set(map(repr, choices))) != len(choices):
            raise BlockError(f"line {i + 1}: knob {m['name']} lists a choice twice")
        if any(k.name == m["name"] for k in knobs):
            raise BlockError(f"line {i + 1}: knob {m['name']} declared twice")
        knobs.append(Knob(m["name"], value, tuple(choices), i))
    return knobs


def set_knobs(source: str, values: dict[str, Any]) -> str:
    """`source` with the named knobs set (each value must be among its declared choices)."""
    return knob_setter(source)(values)


def knob_setter(source: str) -> Callable[[dict[str, Any]], str]:
    """`set_knobs` for one source, parsed once: for code that writes many settings."""
    knobs = {k.name: k for k in parse_knobs(source)}
    lines = source.splitlines()
    spans = {}
    for k in knobs.values():
        span = knob_value_span(lines[k.line])
        assert span is not None
        spans[k.name] = span
    nl = newline_of(source)
    tail = nl if source.endswith("\n") else ""

    def setter(values: dict[str, Any]) -> str:
        out = list(lines)
        for name, value in values.items():
            knob = knobs.get(name)
            if knob is None:
                raise BlockError(f"no knob named {name!r}")
            if value not in knob.choices:
                raise BlockError(f"{value!r} is not a declared choice of {name}: {knob.choices}")
            lo, hi = spans[name]
            out[knob.line] = out[knob.line][:lo] + repr(value) + out[knob.line][hi:]
        return nl.join(out) + tail

    return setter


def knob_values(source: str) -> dict[str, Any]:
    return {k.name: k.value for k in parse_knobs(source)}


def knob_space(source: str) -> list[dict[str, Any]]:
    """Every combination of the declared knob values, in declaration order (the first knob
    varies slowest). A source without knobs has one empty setting."""
    knobs = parse_knobs(source)
    names = [k.name for k in knobs]
    return [dict(zip(names, combo)) for combo in itertools.product(*(k.choices for k in knobs))]


def knob_space_size(source: str) -> int:
    size = 1
    for k in parse_knobs(source):
        size *= len(k.choices)
    return size


def knob_neighbours(source: str, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Settings one step away from `values` (default: the source's current values): exactly
    one knob moved to the adjacent declared choice, in knob order, lower value first."""
    knobs = parse_knobs(source)
    current = {k.name: k.value for k in knobs} if values is None else dict(values)
    out: list[dict[str, Any]] = []
    for k in knobs:
        if current.get(k.name) not in k.choices:
            raise BlockError(f"{current.get(k.name)!r} is not a declared choice of {k.name}")
        i = k.choices.index(current[k.name])
        for j in (i - 1, i + 1):
            if 0 <= j < len(k.choices):
                out.append({**current, k.name: k.choices[j]})
    return out
