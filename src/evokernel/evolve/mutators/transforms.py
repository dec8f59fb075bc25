"""Known source transformations of Triton kernels, applied to an EVOLVE-BLOCK body.

Each transformation is a small pure function `body -> new body | None`: None when its pattern is
absent (or it was already applied), so the offline mutator can ask every one of them and pick
among those that apply. They work on tokens (strings and comments are never touched) and never
see code outside the block. They keep the computed function the same when their pattern is
what it looks like; the evaluator's correctness check is the judge either way.

  exp2               `tl.exp` -> `tl.exp2` and `tl.log` -> `tl.log2`, with log2(e) folded into the
                     one multiplication by the softmax scale: every score, running max and
                     log-sum-exp then lives in base 2, and the normalised output is unchanged
                     (the block's log-sum-exps must stay internal, as in split-K partials).
                     Skipped when base-2 calls already appear or the scale is not multiplied in
                     exactly one place.
  evict_first        `eviction_policy="evict_first"` on streaming loads (keys, values, weights:
                     read once). Loads named neither streaming nor reused are classed by
                     position: inside a loop they stream.
  evict_last         `eviction_policy="evict_last"` on reused loads (queries, activations).
  cache_modifier     `cache_modifier=".cg"` (cache in L2 only) on streaming loads.
  contiguity_hints   `o = p * B + tl.arange(0, B)` ->
                     `o = tl.max_contiguous(tl.multiple_of(p * B + tl.arange(0, B), B), B)`;
                     true by construction: each row starts at a multiple of B and runs B long.
  drop_contiguity_hints  the inverse, for hints in exactly that form.
"""

from __future__ import annotations

import functools
import io
import re
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass

LOG2E = "1.4426950408889634"

_STREAM = {"k", "v", "kv", "key", "keys", "value", "values", "w", "weight", "weights", "cache"}
_REUSE = {"q", "query", "x", "a", "inp", "input", "act", "h", "hidden"}


@dataclass(frozen=True)
class Transform:
    name: str
    summary: str
    fn: Callable[[str], str | None]

    def apply(self, body: str) -> str | None:
        out = self.fn(body)
        return out if out is not None and out != body else None


@dataclass(frozen=True)
class _Tok:
    kind: int
    text: str
    start: int  # character offsets into the body
    end: int
    row: int  # 0-based line


@functools.lru_cache(maxsize=16)
def _tokens(text: str) -> tuple[_Tok, ...] | None:
    """Name, operator, number and string tokens of `text` (cached: every transformation of
    one body reads the same tokens)."""
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    out: list[_Tok] = []
    try:
        for t in tokenize.generate_tokens(io.StringIO(text).readline):
            if t.type in (tokenize.NAME, tokenize.OP, tokenize.NUMBER, tokenize.STRING):
                (r0, c0), (r1, c1) = t.start, t.end
                out.append(_Tok(t.type, t.string, starts[r0 - 1] + c0, starts[r1 - 1] + c1, r0 - 1))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return tuple(out)


def _splice(text: str, edits: list[tuple[int, int, str]]) -> str:
    for lo, hi, new in sorted(edits, reverse=True):
        text = text[:lo] + new + text[hi:]
    return text


@dataclass(frozen=True)
class _Call:
    open: int  # token index of "("
    close: int  # token index of the matching ")"
    args: list[list[_Tok]]  # top-level arguments
    keywords: set[str]


def _calls(toks: Sequence[_Tok], dotted: tuple[str, ...]) -> list[_Call]:
    """Calls of `tl.<...>` spelled exactly as `dotted`, e.g. ("tl", "load")."""
    n = 2 * len(dotted) - 1
    out = []
    for i in range(len(toks) - n):
        if tuple(t.text for t in toks[i : i + n : 2]) != dotted:
            continue
        if any(t.text != "." for t in toks[i + 1 : i + n : 2]) or toks[i + n].text != "(":
            continue
        if i > 0 and toks[i - 1].text == ".":
            continue
        depth = 0
        args: list[list[_Tok]] = []
        cur: list[_Tok] = []
        keywords: set[str] = set()
        for j in range(i + n, len(toks)):
            t = toks[j]
            if t.kind == tokenize.OP and t.text in ("(", "[", "{"):
                depth += 1
                if depth == 1:
                    continue
            elif t.kind == tokenize.OP and t.text in (")", "]", "}"):
                depth -= 1
                if depth == 0:
                    if cur:
                        args.append(cur)
                    out.append(_Call(i + n, j, args, keywords))
                    break
            if depth == 1 and t.text == ",":
                args.append(cur)
                cur = []
                continue
            if depth == 1 and t.text == "=" and cur and len(cur) == 1:
                keywords.add(cur[0].text)
            cur.append(t)
    return out


def _insert_kw(toks: Sequence[_Tok], call: _Call, kw: str) -> tuple[int, int, str]:
    last = toks[call.close - 1]
    if last.text == ",":
        return (last.end, last.end, f" {kw}")
    return (last.end, last.end, f", {kw}")


def _in_loop(text: str, row: int) -> bool:
    lines = text.split("\n")
    depth = len(lines[row]) - len(lines[row].lstrip())
    for line in reversed(lines[:row]):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if indent < depth:
            head = line.lstrip()
            if head.startswith(("for ", "while ")):
                return True
            if head.startswith("def ") or indent == 0:
                return False
            depth = indent
    return False


def _streams(text: str, call: _Call) -> bool:
    names = [t.text for t in call.args[0] if t.kind == tokenize.NAME] if call.args else []
    if names:
        word = names[0].lower().split("_")[0]
        if word in _STREAM:
            return True
        if word in _REUSE:
            return False
    return _in_loop(text, call.args[0][0].row if call.args else 0)


def _load_hint(body: str, keyword: str, value: str, streaming: bool) -> str | None:
    toks = _tokens(body)
    if toks is None:
        return None
    edits = [
        _insert_kw(toks, call, f"{keyword}={value}")
        for call in _calls(toks, ("tl", "load"))
        if call.args and keyword not in call.keywords and _streams(body, call) == streaming
    ]
    return _splice(body, edits) if edits else None


def evict_first_streams(body: str) -> str | None:
    return _load_hint(body, "eviction_policy", '"evict_first"', streaming=True)


def evict_last_reused(body: str) -> str | None:
    return _load_hint(body, "eviction_policy", '"evict_last"', streaming=False)


def add_cache_modifier(body: str) -> str | None:
    return _load_hint(body, "cache_modifier", '".cg"', streaming=True)


def exp_to_exp2(body: str) -> str | None:
    toks = _tokens(body)
    if toks is None:
        return None

    def calls(fn: str) -> list[_Call]:
        return _calls(toks, ("tl", fn)) + _calls(toks, ("tl", "math", fn))

    exps, logs = calls("exp"), calls("log")
    if not exps or calls("exp2") or calls("log2"):
        return None
    muls = []
    for i, t in enumerate(toks):
        if t.kind != tokenize.NAME or "scale" not in t.text.lower():
            continue
        before = toks[i - 1].text if i > 0 else ""
        after = toks[i + 1].text if i + 1 < len(toks) else ""
        if after in ("(", "[", "=", ".", ":"):
            continue
        if before in ("*", "*=") or after == "*":
            muls.append(t)
    if len(muls) != 1:
        return None
    edits = [(muls[0].start, muls[0].end, f"({muls[0].text} * {LOG2E})")]
    for call in exps + logs:
        name = toks[call.open - 1]
        edits.append((name.start, name.end, name.text + "2"))
    return _splice(body, edits)


_OFFS = r"(?P<p>[A-Za-z_][\w.]*(?:\([^()]*\))?)\s*\*\s*(?P<b>[A-Za-z_]\w*)"
_ARANGE = r"tl\.arange\(\s*0\s*,\s*(?P=b)\s*\)"
_HINTABLE = re.compile(
    rf"^(?P<lhs>\s*[A-Za-z_]\w*\s*=\s*)(?P<e>{_OFFS}\s*\+\s*{_ARANGE})\s*(?P<c>#.*)?$"
)
_HINTED = re.compile(
    r"^(?P<lhs>\s*[A-Za-z_]\w*\s*=\s*)tl\.max_contiguous\(tl\.multiple_of\((?P<e>.+), "
    r"(?P<b>[A-Za-z_]\w*)\), (?P=b)\)\s*(?P<c>#.*)?$"
)


def add_contiguity_hints(body: str) -> str | None:
    lines = body.split("\n")
    changed = False
    for i, line in enumerate(lines):
        m = _HINTABLE.match(line)
        if m:
            comment = f"  {m['c']}" if m["c"] else ""
            lines[i] = (
                f"{m['lhs']}tl.max_contiguous(tl.multiple_of({m['e']}, {m['b']}), {m['b']})"
                + comment
            )
            changed = True
    return "\n".join(lines) if changed else None


def drop_contiguity_hints(body: str) -> str | None:
    lines = body.split("\n")
    changed = False
    for i, line in enumerate(lines):
        m = _HINTED.match(line)
        if m:
            lines[i] = f"{m['lhs']}{m['e']}" + (f"  {m['c']}" if m["c"] else "")
            changed = True
    return "\n".join(lines) if changed else None


TRANSFORMS: dict[str, Transform] = {
    t.name: t
    for t in (
        Transform("exp2", "exp -> exp2 with log2(e) folded into the softmax scale", exp_to_exp2),
        Transform(
            "evict_first", 'eviction_policy="evict_first" on streaming loads', evict_first_streams
        ),
        Transform("evict_last", 'eviction_policy="evict_last" on reused loads', evict_last_reused),
        Transform("cache_modifier", 'cache_modifier=".cg" on streaming loads', add_cache_modifier),
        Transform(
            "contiguity_hints",
            "tl.multiple_of/tl.max_contiguous on tile offsets",
            add_contiguity_hints,
        ),
        Transform(
            "drop_contiguity_hints",
            "contiguity hints on tile offsets removed",
            drop_contiguity_hints,
        ),
    )
}
