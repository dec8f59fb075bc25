"""Reading full rewrites and the change line out of answers."""

from __future__ import annotations

import time

import pytest

from evokernel.evolve.mutators.extract import change_line, extract_rewrite, fenced_blocks
from evokernel.tasks.blocks import check_edit, find_block

PARENT = """import torch

# EVOLVE-BLOCK-START
BLOCK = 64  # tune: 32, 64


def f(x):
    return x * 2
# EVOLVE-BLOCK-END


def entry(x):
    return f(x)
"""


def body(code: str) -> str:
    return find_block(code).body(code)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("Change: use exp2\ncode", "use exp2"),
        ("**Change:** bigger tiles", "bigger tiles"),
        ("Some words\n- Summary: `one line`\n", "one line"),
        ("no such line", ""),
        ("## Change:\n\n  **use 8 warps**\t\n", "use 8 warps"),  # on a later line
        ("Change: `\nChange: the second", "the second"),  # the first with text
    ],
)
def test_change_line(answer, expected):
    assert change_line(answer) == expected


def test_change_line_is_linear_in_blank_lines():
    start = time.perf_counter()  # one `\W*` from every line start took 35 s at 40,000
    assert change_line(" \n" * 500_000 + "Change: late") == "late"
    assert time.perf_counter() - start < 5.0


def test_block_with_markers_in_a_fence():
    answer = (
        "Change: x\n```python\n# EVOLVE-BLOCK-START\nBLOCK = 32  # tune: 32, 64\n\n\n"
        "def f(x):\n    return x + x\n# EVOLVE-BLOCK-END\n```\n"
    )
    out = extract_rewrite(answer, PARENT)
    assert out.error == "" and out.code is not None
    assert "return x + x" in out.code and check_edit(PARENT, out.code) is None


def test_whole_file_with_changed_fixed_code_keeps_the_parent_fixed_code():
    child = PARENT.replace("x * 2", "x << 1").replace("import torch", "import os")
    out = extract_rewrite(f"```python\n{child}```", PARENT)
    assert out.code is not None and "import torch" in out.code and "import os" not in out.code
    assert "x << 1" in out.code


def test_whole_file_without_markers_strips_the_repeated_fixed_code():
    child = PARENT.replace("# EVOLVE-BLOCK-START\n", "").replace("# EVOLVE-BLOCK-END\n", "")
    child = child.replace("x * 2", "x + x")
    out = extract_rewrite(f"```\n{child}```", PARENT)
    assert out.code is not None
    assert out.code.count("import torch") == 1 and out.code.count("def entry") == 1
    assert body(out.code).strip().startswith("BLOCK = 64") and "x + x" in body(out.code)


def test_bare_body_without_fence_markers():
    out = extract_rewrite(
        "```python\nBLOCK = 32  # tune: 32, 64\ndef f(x):\n    return 0\n```", PARENT
    )
    assert out.code is not None and body(out.code).startswith("BLOCK = 32")


def test_longest_fence_wins_when_none_has_markers():
    answer = (
        "```\nx\n```\ntext\n```python\nBLOCK = 32  # tune: 32, 64\ndef f(x):\n    return 1\n```"
    )
    out = extract_rewrite(answer, PARENT)
    assert out.code is not None and "return 1" in out.code


def test_unfenced_answer_with_markers():
    answer = "# EVOLVE-BLOCK-START\nBLOCK = 32  # tune: 32, 64\n# EVOLVE-BLOCK-END\n"
    out = extract_rewrite(answer, PARENT)
    assert out.code is not None and body(out.code) == "BLOCK = 32  # tune: 32, 64"


@pytest.mark.parametrize(
    ("answer", "needle"),
    [
        ("just words", "no code block"),
        ("```python\nBLOCK = 32\n", "never closes"),
        ("```python\n# EVOLVE-BLOCK-START\nBLOCK = 32\n```", "only one of the two"),
        ("```python\n# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-END\n```", "is empty"),
        (f"```python\n{PARENT}```", "changes nothing"),
    ],
)
def test_rewrite_errors(answer, needle):
    out = extract_rewrite(answer, PARENT)
    assert out.code is None and needle in out.error


def test_fenced_blocks_in_order_with_their_line_ends():
    text = "a\n```py\nx = 1\n```\nb\n  ```\n```text\ny\n\n\t``` \n```\n```\n```\nopen"
    # a fence with a language is an opening line only: inside a block it is content
    assert fenced_blocks(text) == ["x = 1\n", "```text\ny\n\n", ""]
    assert fenced_blocks("```\n") == [] and fenced_blocks("```") == []


def test_a_megabyte_of_unclosed_fences_reads_in_linear_time():
    answer = "```py\n" * 200_000  # opening fences only: the lazy pattern scanned to the end each
    start = time.perf_counter()
    out = extract_rewrite(answer, PARENT)
    assert time.perf_counter() - start < 5.0 and out.code is None
