"""Reading an LLM's answer: the one-line change summary and a full rewrite of the block.

A rewrite answer holds the new EVOLVE-BLOCK body or a whole file, usually in a code fence.
`extract_rewrite` returns the new program either way:

  * the fenced code that contains both markers (else the longest fence; else, when there is no
    fence, the whole answer if it contains the markers);
  * with markers: the text between them becomes the parent's new block body;
  * without markers: the parent's fixed lines before and after the block are stripped when the
    code repeats them, and the rest becomes the block body.

The parent's fixed code is always kept, so a rewrite can never escape the block. A fence that
never closes (an answer cut off at max_tokens) is an error, not half a kernel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evokernel.tasks.blocks import (
    END,
    START,
    BlockError,
    check_edit,
    find_block,
    find_regions,
    outside,
    replace_block,
)

_FENCE_OPEN = re.compile(r"[ \t]*```[\w+.-]*[ \t]*")  # one whole line
_FENCE_CLOSE = re.compile(r"[ \t]*```[ \t]*")
# Both stop at line ends (a `\W*` from every line start ate all the blank lines after it:
# quadratic); the text may still start on a later line, after blanks and stars.
_CHANGE_HEAD = re.compile(r"[^\w\n]*(?:change|summary)[^\w\n]*:", re.I)
_CHANGE_LEAD = re.compile(r"\s*\**\s*")


@dataclass(frozen=True)
class Rewrite:
    code: str | None
    error: str = ""


def change_line(answer: str, limit: int = 200) -> str:
    """The answer's first non-empty `Change: ...` (or `Summary:`) text, markdown emphasis
    tolerated, or "". Linear in the answer."""
    at = 0
    while True:
        head = _CHANGE_HEAD.match(answer, at)
        if head is not None:
            lead = _CHANGE_LEAD.match(answer, head.end())  # always matches, maybe empty
            start = lead.end() if lead else head.end()
            end = answer.find("\n", start)
            line = answer[start : len(answer) if end < 0 else end]
            text = " ".join(line.rstrip().strip("*_` ").split())
            if text:
                return text[:limit]
        at = answer.find("\n", at) + 1
        if at == 0:
            return ""


def fenced_blocks(text: str) -> list[str]:
    """The bodies of the closed ``` blocks, in order, each with its final line end. One pass
    over the lines: a lazy multi-line pattern was quadratic in the number of fence-like lines,
    and an answer may be megabytes."""
    lines = text.split("\n")
    bodies: list[str] = []
    body: list[str] | None = None
    for i, line in enumerate(lines):
        if body is None:
            if i + 1 < len(lines) and _FENCE_OPEN.fullmatch(line):
                body = []
        elif _FENCE_CLOSE.fullmatch(line):
            bodies.append("".join(ln + "\n" for ln in body))
            body = None
        else:
            body.append(line)
    return bodies


def extract_rewrite(answer: str, parent: str) -> Rewrite:
    text = answer.replace("\r\n", "\n")
    fences = fenced_blocks(text)
    if not fences:
        if sum(1 for line in text.split("\n") if _FENCE_OPEN.fullmatch(line)) % 2 == 1:
            return Rewrite(None, "the answer's code fence never closes (cut off at max_tokens?)")
        if START in text and END in text:
            fences = [text]
        else:
            return Rewrite(None, "no code block in the answer")
    marked = [f for f in fences if START in f and END in f]
    code = marked[0] if marked else max(fences, key=len)
    try:
        single = len(find_regions(parent)) == 1 and START in parent
    except BlockError as err:
        return Rewrite(None, f"parent has malformed EVOLVE-BLOCK markers: {err}")
    if not single:
        return _whole_file(code, parent)
    if marked:
        try:
            body = find_block(code).body(code)
        except BlockError as err:
            return Rewrite(None, f"the rewritten code has malformed markers: {err}")
    elif START in code or END in code:
        return Rewrite(None, "the rewritten code holds only one of the two EVOLVE-BLOCK markers")
    else:
        body = _strip_fixed(code, parent)
    if not body.strip():
        return Rewrite(None, "the rewritten EVOLVE-BLOCK is empty")
    try:
        new = replace_block(parent, body)
    except BlockError as err:
        return Rewrite(None, f"parent has malformed EVOLVE-BLOCK markers: {err}")
    if _same(new, parent):
        return Rewrite(None, "the rewrite changes nothing")
    reason = check_edit(parent, new)
    return Rewrite(None, reason) if reason else Rewrite(new)


def _whole_file(code: str, parent: str) -> Rewrite:
    """A parent with no marker (the whole file evolves) or several EVOLVE-BLOCKs: the answer
    is the whole new file, its fixed code unchanged."""
    if not code.strip():
        return Rewrite(None, "the rewritten program is empty")
    if _same(code, parent):
        return Rewrite(None, "the rewrite changes nothing")
    reason = check_edit(parent, code)
    if reason:
        return Rewrite(None, f"{reason} (answer with the whole file, fixed code unchanged)")
    return Rewrite(code if code.endswith("\n") else code + "\n")


def _strip_fixed(code: str, parent: str) -> str:
    """Drop the parent's fixed lines from the edges of `code` when the answer repeats them."""
    before, after = outside(parent)
    lines = code.split("\n")
    fixed_before = [ln.strip() for ln in before[:-1] if ln.strip()]
    fixed_after = [ln.strip() for ln in after[1:] if ln.strip()]
    content = [i for i, ln in enumerate(lines) if ln.strip()]
    head = [lines[i].strip() for i in content[: len(fixed_before)]]
    if fixed_before and head == fixed_before:
        lines = lines[content[len(fixed_before) - 1] + 1 :]
        content = [i for i, ln in enumerate(lines) if ln.strip()]
    tail = [lines[i].strip() for i in content[len(content) - len(fixed_after) :]]
    if fixed_after and len(content) >= len(fixed_after) and tail == fixed_after:
        lines = lines[: content[len(content) - len(fixed_after)]]
    return "\n".join(lines)


def _same(a: str, b: str) -> bool:
    return [ln.rstrip() for ln in a.splitlines()] == [ln.rstrip() for ln in b.splitlines()]
