"""SEARCH/REPLACE edits: parse them out of an LLM answer and apply them inside the EVOLVE-BLOCK.

An answer holds one or more edits, anywhere among prose and code fences::

    <<<<<<< SEARCH
    acc = acc * alpha
    =======
    acc = acc * alpha[:, None]
    >>>>>>> REPLACE

Parsing is tolerant: 5 to 9 marker characters, spaces around the words, code fences inside an
edit (dropped), CRLF. An edit that starts but never ends is a parse problem, not silently lost.

Applying is strict and all-or-nothing. Each SEARCH text must match exactly one place inside the
region's body, tried in this order, stopping at the first strategy that finds anything:

  1. the exact text, once;
  2. whole lines, ignoring trailing whitespace;
  3. whole lines, ignoring indentation (the replacement is re-indented by the difference);
  4. whole lines, ignoring all whitespace and blank lines.

Two or more matches at one level are ambiguous and fail. A failure names the edit, the first
line of its SEARCH text and the closest line of the block, so the next prompt can fix it.
Markers quoted at the edge of both SEARCH and REPLACE are dropped; an edit that would remove or
add a marker fails.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass

from evokernel.tasks.blocks import END, START, BlockError, check_edit, find_regions, newline_of

_OPEN = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$", re.IGNORECASE)
_MID = re.compile(r"^\s*={5,9}\s*$")
_CLOSE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$", re.IGNORECASE)
_FENCE = re.compile(r"^\s*```[\w+.-]*\s*$")


@dataclass(frozen=True)
class Edit:
    search: str
    replace: str


@dataclass(frozen=True)
class Parsed:
    edits: list[Edit]
    problems: list[str]  # one line each: an edit that was started but not finished


@dataclass(frozen=True)
class Applied:
    code: str | None
    error: str = ""
    fuzzy: int = 0  # edits that needed a whitespace-insensitive match


def parse_edits(answer: str) -> Parsed:
    edits: list[Edit] = []
    problems: list[str] = []
    state, search, replace = "prose", [], []  # type: tuple[str, list[str], list[str]]
    for line in answer.replace("\r\n", "\n").split("\n"):
        if state == "prose":
            if _OPEN.match(line):
                state, search, replace = "search", [], []
        elif state == "search":
            if _MID.match(line):
                state = "replace"
            elif _OPEN.match(line) or _CLOSE.match(line):
                problems.append(f"edit {len(edits) + 1}: SEARCH without '=======' divider")
                state = "search" if _OPEN.match(line) else "prose"
                search = []
            else:
                search.append(line)
        elif _CLOSE.match(line):
            edits.append(Edit(_unfence(search), _unfence(replace)))
            state = "prose"
        elif _OPEN.match(line):
            problems.append(f"edit {len(edits) + 1}: missing '>>>>>>> REPLACE'")
            state, search, replace = "search", [], []
        else:
            replace.append(line)
    if state != "prose":
        problems.append(f"edit {len(edits) + 1}: answer ends inside an edit (cut off?)")
    return Parsed(edits, problems)


def _unfence(lines: list[str]) -> str:
    """Drop code-fence lines and blank lines at the edges of a SEARCH or REPLACE part."""
    lines = list(lines)
    while lines and (not lines[0].strip() or _FENCE.match(lines[0])):
        lines.pop(0)
    while lines and (not lines[-1].strip() or _FENCE.match(lines[-1])):
        lines.pop()
    return "\n".join(lines)


def apply_edits(source: str, edits: list[Edit]) -> Applied:
    """Apply every edit to the region of `source`, or none of them."""
    if not edits:
        return Applied(None, "no SEARCH/REPLACE edit found")
    nl = newline_of(source)
    code = source.replace("\r\n", "\n")
    fuzzy = 0
    for n, edit in enumerate(edits, 1):
        label = f"edit {n} of {len(edits)}" if len(edits) > 1 else "the edit"
        try:
            regions = find_regions(code)
        except BlockError as bad:
            return Applied(None, f"{label}: {bad}")
        lines = code.split("\n")
        search, replace, problem = _strip_markers(edit)
        if problem:
            return Applied(None, f"{label}: {problem}")
        if not search.strip():
            return Applied(None, f"{label}: empty SEARCH text; quote the lines to replace")
        found, problems = [], []
        for block in regions:
            end = block.end if block.start >= 0 else len(lines)
            body = lines[block.start + 1 : end]
            new_body, level, problem = _apply_one(body, search, replace)
            if new_body is not None:
                found.append((block.start, end, new_body, level))
            elif problem:
                problems.append(problem)
        if len(found) > 1:
            return Applied(None, f"{label}: SEARCH text matches {len(found)} EVOLVE-BLOCKs; "
                                 "quote more lines to make it unique")  # fmt: skip
        if not found:
            block = regions[0]
            end = block.end if block.start >= 0 else len(lines)
            body = lines[block.start + 1 : end]
            problem = problems[0] if problems else _not_found(search, body, lines, block.start)
            return Applied(None, f"{label}: {problem}")
        start, end, new_body, level = found[0]
        fuzzy += level > 1
        code = "\n".join([*lines[: start + 1], *new_body, *lines[end:]])
    if code == source.replace("\r\n", "\n"):
        return Applied(None, "the edits change nothing")
    reason = check_edit(source, code)
    if reason:
        return Applied(None, reason)
    return Applied(code.replace("\n", nl) if nl != "\n" else code, fuzzy=fuzzy)


def _strip_markers(edit: Edit) -> tuple[str, str, str]:
    s = edit.search.split("\n")
    r = edit.replace.split("\n")
    for marker, idx in ((START, 0), (END, -1)):
        s_has = bool(s) and s[idx].strip() == marker
        r_has = bool(r) and r[idx].strip() == marker
        if s_has and r_has:
            s, r = (s[1:], r[1:]) if idx == 0 else (s[:-1], r[:-1])
        elif s_has != r_has:
            return "", "", f"it would {'remove' if s_has else 'add'} the '{marker}' marker"
    if any(ln.strip() in (START, END) for ln in s + r):
        return "", "", "EVOLVE-BLOCK markers may only appear at the edges of an edit"
    return "\n".join(s), "\n".join(r), ""


_Norm = Callable[[str], str]
_LEVELS: tuple[tuple[_Norm, bool], ...] = (
    (str.rstrip, False),
    (str.strip, False),
    (lambda s: "".join(s.split()), True),
)


def _apply_one(body: list[str], search: str, replace: str) -> tuple[list[str] | None, int, str]:
    """(new body, strategy level 1-4, error). The error is empty when SEARCH was not found."""
    text = "\n".join(body)
    hits = _exact_hits(text, search)
    if len(hits) == 1:
        at = hits[0]
        return (text[:at] + replace + text[at + len(search) :]).split("\n"), 1, ""
    exact_many = len(hits) > 1
    s_lines = search.split("\n")
    for level, (norm, skip_blank) in enumerate(_LEVELS, 2):
        spans = _line_matches(body, s_lines, norm, skip_blank)
        if len(spans) > 1 or (not spans and exact_many):
            count = len(spans) if spans else len(hits)
            return (
                None,
                level,
                (
                    f"SEARCH text matches {count} places in the EVOLVE-BLOCK "
                    f"(first line {s_lines[0].strip()[:70]!r}); quote more lines to make it unique"
                ),
            )
        if spans:
            lo, hi = spans[0]
            new = _reindent(body[lo:hi], s_lines, replace.split("\n")) if level > 2 else None
            return [*body[:lo], *(new or replace.split("\n")), *body[hi:]], level, ""
    return None, 0, ""


def _exact_hits(text: str, search: str) -> list[int]:
    """Offsets where `search` occurs without cutting an identifier or number in two."""
    hits, at = [], text.find(search)
    while at >= 0:
        end = at + len(search)
        cuts_left = at > 0 and _word(text[at - 1]) and _word(search[0])
        cuts_right = end < len(text) and _word(text[end]) and _word(search[-1])
        if not cuts_left and not cuts_right:
            hits.append(at)
        at = text.find(search, at + 1)
    return hits


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _line_matches(
    body: list[str], s_lines: list[str], norm: _Norm, skip_blank: bool
) -> list[tuple[int, int]]:
    idx = [i for i, ln in enumerate(body) if not skip_blank or ln.strip()]
    want = [norm(ln) for ln in s_lines if not skip_blank or ln.strip()]
    have = [norm(body[i]) for i in idx]
    spans = []
    for j in range(len(have) - len(want) + 1):
        if have[j : j + len(want)] == want:
            spans.append((idx[j], idx[j + len(want) - 1] + 1))
    return spans


def _reindent(matched: list[str], s_lines: list[str], r_lines: list[str]) -> list[str]:
    """Shift the replacement by the indentation difference between the block and SEARCH."""
    have = _indent(next((ln for ln in matched if ln.strip()), ""))
    want = _indent(next((ln for ln in s_lines if ln.strip()), ""))
    if have == want:
        return r_lines
    out = []
    for ln in r_lines:
        if not ln.strip():
            out.append(ln)
        elif have.startswith(want):
            out.append(have[len(want) :] + ln)
        elif want.startswith(have) and ln.startswith(want[len(have) :]):
            out.append(ln[len(want) - len(have) :])
        else:
            out.append(ln)
    return out


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _not_found(search: str, body: list[str], lines: list[str], start: int) -> str:
    first = next((ln.strip() for ln in search.split("\n") if ln.strip()), "")
    outside_lines = lines[: start + 1] + lines[start + 1 + len(body) :]
    if search in "\n".join(outside_lines) or first in (ln.strip() for ln in outside_lines):
        return f"SEARCH text {first[:70]!r} is in the fixed code outside the EVOLVE-BLOCK"
    msg = f"SEARCH text not found in the EVOLVE-BLOCK: {first[:70]!r}"
    stripped = [ln.strip() for ln in body]
    close = difflib.get_close_matches(first, stripped, n=1, cutoff=0.6)
    if close:
        msg += f"; closest block line {start + 2 + stripped.index(close[0])}: {close[0][:70]!r}"
    return msg
