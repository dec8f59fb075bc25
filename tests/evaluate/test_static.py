"""The static pre-check: what it accepts, what it names, and the kernels it finds; the source
gate before it: size and encoding."""

from __future__ import annotations

import pytest

from evokernel.evaluate.static import (
    MAX_SOURCE_BYTES,
    check_source,
    source_problems,
    triton_kernels,
)
from evokernel.tasks import TASK_NAMES, get_task

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"


def wrap(body: str, header: str = HEADER) -> str:
    return f"{header}# EVOLVE-BLOCK-START\n{body}\n# EVOLVE-BLOCK-END\n"


@pytest.mark.parametrize("task", TASK_NAMES)
def test_seeds_pass(task: str) -> None:
    source = get_task(task).seed_candidate.read_text()
    assert check_source(source) == []
    assert triton_kernels(source)


@pytest.mark.parametrize(
    "body, needle",
    [
        ("import os", "import of 'os'"),
        ("from subprocess import run", "import from 'subprocess'"),
        ("import numpy", "import of 'numpy'"),
        ("from . import x", "import from '.'"),
        ("x = eval('1')", "'eval'"),
        ("x = __import__('os')", "'__import__'"),
        ("f = open('/etc/passwd')", "'open'"),
        ("g = globals()", "'globals'"),
        ("y = getattr(torch, 'cuda')", "'getattr'"),
        ("c = torch.ones(1).__class__", "'__class__'"),
        ("s = torch.cuda.Stream()", "'torch.cuda.Stream'"),
        ("torch.cuda.synchronize()", "'torch.cuda.synchronize'"),
        ("e = torch.cuda.Event(enable_timing=True)", "'torch.cuda.Event'"),
        ("torch.allclose = lambda *a: True", "library attribute"),
        ("torch.nn.functional.softmax = None", "library attribute"),
        ("tl.sum = None", "library attribute"),
        ("torch.use_deterministic_algorithms(False)", "torch.use_deterministic_algorithms"),
        ("torch.utils.deterministic.fill_uninitialized_memory = False", "'torch.utils'"),
        ("f = torch.compile(lambda x: x)", "'torch.compile'"),
        ("torch.backends.cuda.matmul.allow_tf32 = True", "'torch.backends'"),
        ("from triton.runtime import driver", "'triton.runtime'"),
        ("def f():\n    global X", "'global'"),
    ],
)
def test_forbidden_constructs_are_named_with_their_line(body: str, needle: str) -> None:
    lines = check_source(wrap(body))
    assert lines, body
    assert any(needle in line for line in lines), lines
    assert all(line.startswith("static: ") for line in lines)
    assert any("line 5" in line or "line 6" in line for line in lines), lines


def test_aliases_are_resolved() -> None:
    source = wrap("s = T.cuda.Stream()\nq = C.Stream()", "import torch as T\nimport torch\n")
    text = "\n".join(check_source(source))
    assert "torch.cuda.Stream" in text
    source = wrap("x = F.softmax", "import torch.nn.functional as F\n")
    assert check_source(source) == []


def test_markers_and_syntax() -> None:
    assert "EVOLVE-BLOCK" in check_source(HEADER + "x = 1\n")[0]
    assert "syntax error" in check_source(wrap("def f(:\n    pass"))[0]
    twice = wrap("x = 1") + wrap("y = 2", "")
    assert "EVOLVE-BLOCK" in check_source(twice)[0]


def test_allowed_imports() -> None:
    header = (
        "from __future__ import annotations\nimport math\nimport functools\n"
        "from typing import Any\nimport torch.nn.functional as F\n" + HEADER
    )
    assert check_source(wrap("X = math.pi", header)) == []


def test_triton_kernels_sees_decorated_functions_only() -> None:
    source = wrap(
        "@triton.jit\ndef _a(x):\n    pass\n\n"
        "@triton.autotune(configs=[], key=[])\n@triton.jit\ndef _b(x):\n    pass\n\n"
        "def _launcher():\n    pass"
    )
    assert triton_kernels(source) == ["_a", "_b"]


# Valid-looking sources on which CPython's parser fails with other errors than SyntaxError:
# RecursionError (attribute, call and subscript chains, long operator chains), MemoryError
# (the parser's own stack: nested lambdas, unary operators, conditional expressions).
UNPARSABLE = {
    "attributes": "x = a" + ".b" * 100_000,
    "calls": "x = f" + "()" * 100_000,
    "subscripts": "x = a" + "[0]" * 50_000,
    "sum": "x = " + "+".join(["1"] * 100_000),
    "lambdas": "x = " + "lambda: " * 5_000 + "1",
    "nots": "x = " + "not " * 50_000 + "1",
    "negations": "x = " + "-" * 50_000 + "1",
    "conditionals": "x = " + "1 if 1 else " * 20_000 + "1",
}


@pytest.mark.parametrize("body", UNPARSABLE.values(), ids=list(UNPARSABLE))
def test_sources_the_parser_cannot_take_are_reasons_not_exceptions(body: str) -> None:
    source = wrap(body)
    assert source_problems(source) == []  # within the limit: the parser is the one to fail
    (line,) = check_source(source)
    assert line.startswith("static: ") and "syntax error" in line
    assert triton_kernels(source) == []  # the profiler's kernel list, with the pre-check off


def test_the_gate_names_size_surrogates_and_nul() -> None:
    assert source_problems(wrap("x = 1")) == []
    big = wrap("x = 1\n" * (MAX_SOURCE_BYTES // 6))
    assert "the limit is 256 KiB" in source_problems(big)[0]
    wide = wrap("x = '" + "\u00e9" * (MAX_SOURCE_BYTES // 2) + "'")  # few characters, many bytes
    assert len(wide) < MAX_SOURCE_BYTES and "bytes in UTF-8" in source_problems(wide)[0]
    (line,) = source_problems(wrap("x = 1\ny = '\ud800'"))
    assert line == "static: line 6: not valid Unicode text (a lone surrogate)"
    assert source_problems(wrap("x = 1\0")) == ["static: line 5: a NUL character"]
    assert check_source(wrap("x = '\ud800'"))[0].startswith("static: syntax error: not valid")


@pytest.mark.parametrize(
    "head",
    [
        "# coding: utf-7\n",
        "#!/usr/bin/env python\n# -*- coding: latin-1 -*-\n",
        "\r# coding: utf-7\r",  # CR line ends: the import system reads it, PEP 263's regex not
        "\x0c#coding=utf_16\n",
        "# vim: set fileencoding=nonsense :\n",
    ],
)
def test_a_coding_declaration_other_than_utf8_is_refused(head: str) -> None:
    (line,) = source_problems(head + wrap("x = 1"))
    assert line.startswith("static: a coding declaration of ")


def test_utf8_declarations_pass() -> None:
    for head in ("# -*- coding: utf-8 -*-\n", "# coding=UTF8\n", "\ufeff# coding: utf_8\n"):
        assert source_problems(head + wrap("x = 1")) == []
