"""Small source edits of any Python inside the evolvable regions, found by the parser.

    moves = find_moves(source)                 # every edit that applies, by family
    child, line = apply(source, move, rng)     # one edit, its one-line description

No annotation is needed: the module parses the whole file and edits only nodes that lie wholly
inside a region (`blocks.find_regions`: the EVOLVE-BLOCKs, or the whole file without markers).
Edits are text replacements at the nodes' positions, so comments, formatting and everything
outside the edited span stay as they were, and the child differs from its parent only where it
must. The families:

  const      a numeric literal perturbed within its scale: a power of two doubles or halves (so
             block sizes and warp counts stay powers of two); an integer up to 8 moves by one
             or doubles; a larger one is scaled by 2, 1/2, 1.25, 0.8, 10 or 1/10 (rounded); a
             float is scaled by a factor in [0.5, 2]; a sign flips rarely (1 in 20); a boolean
             flips. Never 0, never an index (`x[0]`), never a declared knob's value.
  operator   `+`<->`-`, `*`<->`/`, `//`<->`/`, `<`<->`<=`, `>`<->`>=`, `<`<->`>`, `==`<->`!=`,
             `and`<->`or`, `+=`<->`-=`, `*=`<->`/=`, `min`<->`max` (also `minimum`/`maximum`).
  statement  delete, duplicate or swap adjacent whole-line statements of one block (never a
             `def`, `class`, `import` or `return`, never a block's last statement).
  control    negate an `if` condition, drop an `if` guard (its body runs unconditionally), drop
             an `else` branch, walk a `range(...)` loop backwards, or step a `range(a, b)` by 2.

Every child is parsed and compiled before it is returned (`compiles`); a candidate edit that
breaks the syntax is skipped, and callers count it. Randomness comes only from the `rng`
passed in.
"""

from __future__ import annotations

import ast
import contextlib
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from evokernel import pysource
from evokernel.tasks import blocks

FAMILIES = ("const", "operator", "statement", "control")

_BIN_SWAP: dict[type, tuple[type, str, str]] = {
    ast.Add: (ast.Sub, "+", "-"),
    ast.Sub: (ast.Add, "-", "+"),
    ast.Mult: (ast.Div, "*", "/"),
    ast.Div: (ast.Mult, "/", "*"),
    ast.FloorDiv: (ast.Div, "//", "/"),
}
_CMP_SWAP: dict[type, list[tuple[str, str]]] = {
    ast.Lt: [("<", "<="), ("<", ">")],
    ast.LtE: [("<=", "<"), ("<=", ">=")],
    ast.Gt: [(">", ">="), (">", "<")],
    ast.GtE: [(">=", ">"), (">=", "<=")],
    ast.Eq: [("==", "!=")],
    ast.NotEq: [("!=", "==")],
}
_AUG_SWAP = {ast.Add: ("+=", "-="), ast.Sub: ("-=", "+="), ast.Mult: ("*=", "/="),
             ast.Div: ("/=", "*=")}  # fmt: skip
_NAME_SWAP = {"min": "max", "max": "min", "minimum": "maximum", "maximum": "minimum",
              "argmin": "argmax", "argmax": "argmin"}  # fmt: skip
_FIXED_STATEMENTS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import,
                     ast.ImportFrom, ast.Return, ast.Global, ast.Nonlocal)  # fmt: skip


@dataclass(frozen=True)
class Span:
    """A text span of the source: (line, column) to (line, column), 0-based, in characters."""

    start: tuple[int, int]
    end: tuple[int, int]


@dataclass(frozen=True)
class Move:
    """One applicable edit: its family, where it acts, and the data `apply` needs."""

    family: str
    kind: str  # e.g. "const", "binop", "compare", "delete", "negate-if"
    span: Span
    line: int  # 1-based line, for the description
    text: str  # the current text of the span
    options: tuple[str, ...] = ()  # replacement texts to choose from (operator, control)
    other: Span | None = None  # swap: the second statement
    other_text: str = ""


class _Source:
    """The source as lines, with AST byte columns turned into character columns."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.tree = pysource.parse(source)
        self.regions = blocks.region_lines(source)
        self.knob_lines: set[int] = set()
        with contextlib.suppress(blocks.BlockError):
            self.knob_lines = {k.line for k in blocks.parse_knobs(source)}

    def col(self, line: int, byte_col: int) -> int:
        """Character column of a 1-based line's UTF-8 byte column."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return len(text.encode()[:byte_col].decode(errors="replace"))

    def span(self, node: ast.AST) -> Span:
        lo, hi = node.lineno, node.end_lineno or node.lineno  # type: ignore[attr-defined]
        return Span(
            (lo - 1, self.col(lo, node.col_offset)),  # type: ignore[attr-defined]
            (hi - 1, self.col(hi, node.end_col_offset or 0)),  # type: ignore[attr-defined]
        )

    def text(self, span: Span) -> str:
        (l0, c0), (l1, c1) = span.start, span.end
        if l0 == l1:
            return self.lines[l0][c0:c1]
        return self.lines[l0][c0:] + "".join(self.lines[l0 + 1 : l1]) + self.lines[l1][:c1]

    def inside(self, span: Span) -> bool:
        return any(lo <= span.start[0] and span.end[0] < hi for lo, hi in self.regions)

    def whole_lines(self, span: Span) -> bool:
        """Nothing but blanks before the span on its first line and after it on its last
        (a trailing comment is fine)."""
        (l0, c0), (l1, c1) = span.start, span.end
        after = self.lines[l1][c1:].strip()
        return not self.lines[l0][:c0].strip() and (not after or after.startswith("#"))


def replace(source: str, edits: list[tuple[Span, str]]) -> str:
    """`source` with each span replaced (spans must not overlap)."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    out, at = [], 0
    for span, text in sorted(edits, key=lambda e: e[0].start):
        lo = offsets[span.start[0]] + span.start[1]
        hi = offsets[span.end[0]] + span.end[1]
        out.append(source[at:lo])
        out.append(text)
        at = hi
    out.append(source[at:])
    return "".join(out)


def compiles(code: str) -> str:
    """ "" when `code` parses and compiles, else a one-line reason."""
    try:
        compile(pysource.parse(code), "<child>", "exec")
    except SyntaxError as err:
        return f"syntax error at line {err.lineno}: {err.msg}"
    except (ValueError, RecursionError, MemoryError) as err:
        return f"does not compile: {type(err).__name__}"
    return ""


# --- finding moves -----------------------------------------------------------------------------
def find_moves(source: str) -> dict[str, list[Move]]:
    """Every applicable move by family (empty lists where none applies). A source that does
    not parse has no moves."""
    try:
        src = _Source(source)
    except (SyntaxError, blocks.BlockError):
        return {f: [] for f in FAMILIES}
    found: dict[str, list[Move]] = {f: [] for f in FAMILIES}
    index_nodes = _index_nodes(src.tree)
    for node in ast.walk(src.tree):
        if not hasattr(node, "lineno"):
            _statement_moves(src, node, found)
            continue
        span = src.span(node)
        if not src.inside(span):
            _statement_moves(src, node, found)
            continue
        if id(node) not in index_nodes:
            _const_move(src, node, span, found)
        _operator_moves(src, node, found)
        _control_moves(src, node, span, found)
        _statement_moves(src, node, found)
    return found


def _index_nodes(tree: ast.AST) -> set[int]:
    """Constants used as subscripts (`x[0]`, `x[1:2]`, `x[0, 1]`): never perturbed."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            for sub in ast.walk(node.slice):
                ids.add(id(sub))
    return ids


def _const_move(src: _Source, node: ast.AST, span: Span, found: dict[str, list[Move]]) -> None:
    if span.start[0] in src.knob_lines:
        return
    value = _literal(node)
    if value is None:
        return
    text = src.text(span)
    found["const"].append(Move("const", "const", span, span.start[0] + 1, text))


def _literal(node: ast.AST) -> bool | int | float | None:
    """A numeric or boolean literal (a negated one included), never 0 or a string."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal(node.operand)
        return None if inner is None or isinstance(inner, bool) else -inner
    if not isinstance(node, ast.Constant) or isinstance(node.value, (str, bytes, complex)):
        return None
    value = node.value
    if value is None or value is Ellipsis:
        return None
    if isinstance(value, bool):
        return value
    return value if value != 0 and math.isfinite(value) else None


def _operator_moves(src: _Source, node: ast.AST, found: dict[str, list[Move]]) -> None:
    pairs: list[tuple[ast.AST, ast.AST, str, tuple[str, ...]]] = []
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN_SWAP:
        _, old, new = _BIN_SWAP[type(node.op)]
        pairs.append((node.left, node.right, old, (new,)))
    elif isinstance(node, ast.Compare):
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            if type(op) in _CMP_SWAP:
                swaps = _CMP_SWAP[type(op)]
                pairs.append((left, right, swaps[0][0], tuple(s[1] for s in swaps)))
            left = right
    elif isinstance(node, ast.BoolOp):
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        for first, second in zip(node.values, node.values[1:]):
            pairs.append((first, second, old, (new,)))
    elif isinstance(node, ast.AugAssign) and type(node.op) in _AUG_SWAP:
        old, new = _AUG_SWAP[type(node.op)]
        pairs.append((node.target, node.value, old, (new,)))
    elif isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name in _NAME_SWAP:
            (l1, c1) = src.span(func).end
            call = Span((l1, c1 - len(name)), (l1, c1))
            if src.inside(call) and src.text(call) == name:
                found["operator"].append(
                    Move("operator", "call", call, l1 + 1, name, (_NAME_SWAP[name],))
                )
        return
    for a, b, symbol, options in pairs:
        gap = Span(src.span(a).end, src.span(b).start)
        if not src.inside(gap):
            continue
        at = _symbol_in(src, gap, symbol)
        if at is not None:
            found["operator"].append(Move("operator", "operator", at, at.start[0] + 1, symbol,
                                          options))  # fmt: skip


def _symbol_in(src: _Source, gap: Span, symbol: str) -> Span | None:
    """Where `symbol` stands in the text between two operands (only brackets, blanks and line
    continuations around it), or None."""
    text = src.text(gap)
    bare = text.replace("(", " ").replace(")", " ").replace("\\", " ")
    if bare.split() != [symbol]:
        return None
    offset = bare.index(symbol if not symbol.isalpha() else f"{symbol}")
    line, col = gap.start
    for ch in text[:offset]:
        if ch == "\n":
            line, col = line + 1, 0
        else:
            col += 1
    return Span((line, col), (line, col + len(symbol)))


def _control_moves(src: _Source, node: ast.AST, span: Span, found: dict[str, list[Move]]) -> None:
    if isinstance(node, ast.If):
        test = src.span(node.test)
        text = src.text(test)
        if "\n" not in text:
            negated = text[4:].strip() if text.startswith("not ") else f"not ({text})"
            found["control"].append(Move("control", "negate-if", test, test.start[0] + 1, text,
                                         (negated,)))  # fmt: skip
        if not node.orelse and src.whole_lines(span) and _is_if_statement(src, node, span):
            body = Span(src.span(node.body[0]).start, src.span(node.body[-1]).end)
            if src.whole_lines(body):
                found["control"].append(Move("control", "drop-if", span, span.start[0] + 1,
                                             src.text(span), other=body))  # fmt: skip
        if node.orelse and not _is_elif(src, node) and src.whole_lines(span):
            body = Span(src.span(node.body[0]).start, src.span(node.body[-1]).end)
            head = Span(span.start, body.end)
            if src.whole_lines(body):
                found["control"].append(Move("control", "drop-else", span, span.start[0] + 1,
                                             src.text(span), other=head))  # fmt: skip
    if isinstance(node, ast.For) and isinstance(node.iter, ast.Call):
        call = node.iter
        if isinstance(call.func, ast.Name) and call.func.id == "range" and not call.keywords:
            it = src.span(call)
            text = src.text(it)
            if "\n" not in text:
                options = [f"reversed({text})"]
                if len(call.args) == 2:
                    options.append(f"{text[:-1].rstrip()}, 2)")
                found["control"].append(Move("control", "range", it, it.start[0] + 1, text,
                                             tuple(options)))  # fmt: skip


def _is_if_statement(src: _Source, node: ast.If, span: Span) -> bool:
    return src.lines[span.start[0]][span.start[1] :].startswith("if")


def _is_elif(src: _Source, node: ast.If) -> bool:
    first = node.orelse[0]
    if not isinstance(first, ast.If):
        return False
    return src.lines[first.lineno - 1].lstrip().startswith("elif")


def _statement_moves(src: _Source, node: ast.AST, found: dict[str, list[Move]]) -> None:
    for field in ("body", "orelse", "finalbody"):
        body = getattr(node, field, None)
        if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
            continue
        spans = [_stmt_span(src, s) for s in body]
        for i, (stmt, span) in enumerate(zip(body, spans)):
            if span is None or not src.inside(span) or isinstance(stmt, _FIXED_STATEMENTS):
                continue
            if _docstring(stmt, i):
                continue
            text = src.text(span)
            line = span.start[0] + 1
            if len(body) > 1:
                found["statement"].append(Move("statement", "delete", span, line, text))
            if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)):
                found["statement"].append(Move("statement", "duplicate", span, line, text))
            nxt = spans[i + 1] if i + 1 < len(body) else None
            if (
                nxt is not None
                and src.inside(nxt)
                and not isinstance(body[i + 1], _FIXED_STATEMENTS)
                and nxt.start[1] == span.start[1]
            ):
                found["statement"].append(Move("statement", "swap", span, line, text, other=nxt,
                                               other_text=src.text(nxt)))  # fmt: skip


def _docstring(stmt: ast.stmt, i: int) -> bool:
    return (
        i == 0
        and isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _stmt_span(src: _Source, stmt: ast.stmt) -> Span | None:
    """The statement's whole lines (decorators included), or None when it shares a line."""
    first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
    span = src.span(stmt)
    span = Span((first - 1, span.start[1] if first == stmt.lineno else 0), span.end)
    if first != stmt.lineno:
        lead = src.lines[first - 1]
        span = Span((first - 1, len(lead) - len(lead.lstrip())), span.end)
    return span if src.whole_lines(span) else None


def named_units(source: str) -> dict[str, tuple[Span, str]]:
    """The module-level statements inside the regions that have a name (a `def`, a `class`,
    an assignment to one name), as {name: (whole-line span, text)}: what crossover swaps."""
    try:
        src = _Source(source)
    except (SyntaxError, blocks.BlockError):
        return {}
    units: dict[str, tuple[Span, str]] = {}
    for stmt in src.tree.body:
        name = None
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = stmt.name
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            name = target.id if isinstance(target, ast.Name) else None
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            name = stmt.target.id
        span = _stmt_span(src, stmt)
        if name and span is not None and src.inside(span) and name not in units:
            lines = src.lines[span.start[0] : span.end[0] + 1]
            units[name] = (span, "".join(lines))
    return units


def splice(source: str, donor: str, names: list[str]) -> str:
    """`source` with the named units replaced by `donor`'s (whole lines)."""
    mine, theirs = named_units(source), named_units(donor)
    lines = source.splitlines(keepends=True)
    order = sorted(names, key=lambda n: mine[n][0].start[0], reverse=True)
    for name in order:
        span, _ = mine[name]
        text = theirs[name][1]
        if not text.endswith("\n"):
            text += "\n"
        lines[span.start[0] : span.end[0] + 1] = [text]
    return "".join(lines)


# --- applying moves ----------------------------------------------------------------------------
def new_number(value: bool | int | float, rng: random.Random) -> bool | int | float:
    """A perturbed literal within the value's scale (see the module docstring)."""
    if isinstance(value, bool):
        return not value
    if rng.random() < 0.05:
        return -value
    if isinstance(value, int):
        size = abs(value)
        if size >= 2 and size & (size - 1) == 0:
            return value * 2 if rng.random() < 0.5 else value // 2
        if size <= 8:
            choices = [value + 1, value - 1, value * 2]
        else:
            choices = [round(value * f) for f in (2.0, 0.5, 1.25, 0.8, 10.0, 0.1)]
        choices = [c for c in choices if c != 0 and c != value]
        return rng.choice(choices) if choices else value * 2
    factor = rng.choice([0.5, 0.8, 0.9, 1.1, 1.25, 2.0]) if rng.random() < 0.5 else None
    if factor is None:
        factor = math.exp(rng.uniform(-math.log(2), math.log(2)))
    return float(f"{value * factor:.4g}")


def _number_text(value: bool | int | float) -> str:
    return repr(value)


def _dedent(text: str, by: int) -> str:
    out = []
    for line in text.splitlines(keepends=True):
        cut = min(by, len(line) - len(line.lstrip(" \t"))) if line.strip() else min(by, len(line))
        out.append(line[cut:])
    return "".join(out)


def apply(source: str, move: Move, rng: random.Random) -> tuple[str, str]:
    """(child source, one-line description) of `move` on `source`; draws from `rng`."""
    where = f"line {move.line}"
    if move.family == "const":
        value = pysource.literal_eval(move.text)
        new = new_number(value, rng)
        text = _number_text(new)
        if text.startswith("-") and not move.text.startswith("-"):
            text = f"({text})"
        return replace(source, [(move.span, text)]), f"{where}: {move.text} -> {text}"
    if move.family in ("operator",) or move.kind in ("negate-if", "range"):
        option = rng.choice(move.options)
        child = replace(source, [(move.span, option)])
        return child, f"{where}: {move.text!r} -> {option!r}"[:200]
    lines = source.splitlines(keepends=True)
    if move.kind in ("delete", "duplicate", "swap"):
        first, last = move.span.start[0], move.span.end[0]
        block = "".join(lines[first : last + 1])
        if not block.endswith("\n"):
            block += "\n"
        if move.kind == "delete":
            child = "".join(lines[:first] + lines[last + 1 :])
            return child, f"{where}: deleted {_short(move.text)}"
        if move.kind == "duplicate":
            child = "".join([*lines[: last + 1], block, *lines[last + 1 :]])
            return child, f"{where}: duplicated {_short(move.text)}"
        assert move.other is not None
        o_first, o_last = move.other.start[0], move.other.end[0]
        between = lines[last + 1 : o_first]
        other = "".join(lines[o_first : o_last + 1])
        if not other.endswith("\n"):
            other += "\n"
        child = "".join([*lines[:first], other, *between, block, *lines[o_last + 1 :]])
        return child, f"{where}: swapped {_short(move.text)} with {_short(move.other_text)}"
    assert move.other is not None
    first, last = move.span.start[0], move.span.end[0]
    body_first, body_last = move.other.start[0], move.other.end[0]
    indent = move.span.start[1]
    if move.kind == "drop-if":
        body = "".join(lines[body_first : body_last + 1])
        shift = move.other.start[1] - indent
        child = "".join([*lines[:first], _dedent(body, shift), *lines[last + 1 :]])
        return child, f"{where}: dropped the guard {_short(move.text)}"
    # drop-else: keep the `if` and its body, lose the else branch
    child = "".join([*lines[: body_last + 1], *lines[last + 1 :]])
    return child, f"{where}: dropped the else branch of {_short(move.text)}"


def _short(text: str) -> str:
    first = text.strip().split("\n", 1)[0]
    return repr(first[:60] + ("..." if len(first) > 60 or "\n" in text.strip() else ""))


def children(source: str, rng: random.Random, family: str | None = None) -> Iterator[
    tuple[str, str, str]
]:  # fmt: skip
    """Random moves of one family (or any) on `source`, as (family, child, description), each
    child compiled; a child that does not compile is yielded with description "" (for the
    caller to count). Ends when every move was tried once."""
    moves = find_moves(source)
    pool = [m for f, ms in moves.items() if family in (None, f) for m in ms]
    rng.shuffle(pool)
    for move in pool:
        child, line = apply(source, move, rng)
        yield move.family, child, (line if not compiles(child) else "")
