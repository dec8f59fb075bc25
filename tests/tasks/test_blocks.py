"""EVOLVE-BLOCK markers, the edit rule, and declared knobs."""

from __future__ import annotations

import contextlib
import time

import pytest

from evokernel.tasks.blocks import (
    BlockError,
    check_edit,
    find_block,
    knob_neighbours,
    knob_space,
    knob_space_size,
    knob_values,
    parse_knobs,
    replace_block,
    set_knobs,
)

SRC = """import triton

# EVOLVE-BLOCK-START
BLOCK_N = 64  # tune: 16, 32, 64, 128
NUM_WARPS: int = 4  # tune: 2, 4, 8
MODE = "fast"  # tune: "fast", "safe"
NUM_STAGES = 2


def helper(x):
    return x * BLOCK_N
# EVOLVE-BLOCK-END


def entry(x):
    return helper(x)
"""


def test_find_block_and_body():
    block = find_block(SRC)
    assert (block.start, block.end, block.indent) == (2, 11, "")
    assert block.body(SRC).splitlines()[0] == "BLOCK_N = 64  # tune: 16, 32, 64, 128"
    assert replace_block(SRC, block.body(SRC)) == SRC


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("x = 1\n", "found 0 (lines -) and 0 (lines -)"),
        (
            "# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-END\n",
            "found 2 (lines 1, 2)",
        ),
        ("# EVOLVE-BLOCK-END\nx = 1\n# EVOLVE-BLOCK-START\n", "(line 1) comes before"),
        ("# EVOLVE-BLOCK-START:\nx = 1\n# EVOLVE-BLOCK-END\n", "line 1 looks like a marker"),
        ("#EVOLVE-BLOCK-START\nx = 1\n# EVOLVE-BLOCK-END\n", "looks like a marker"),
    ],
)
def test_malformed_markers(source, needle):
    with pytest.raises(BlockError) as err:
        find_block(source)
    assert needle in str(err.value)


def test_indented_markers_crlf_and_trailing_whitespace():
    src = "class K:\r\n    # EVOLVE-BLOCK-START   \r\n    A = 1\r\n    # EVOLVE-BLOCK-END\r\n"
    block = find_block(src)
    assert block.indent == "    " and block.body(src) == "    A = 1"
    out = replace_block(src, "B = 2\nC = 3")  # flush-left body is indented to the markers
    assert "    B = 2\r\n    C = 3\r\n" in out
    crlf = SRC.replace("\n", "\r\n")
    assert replace_block(crlf, "X = 1").count("\r\n") == replace_block(SRC, "X = 1").count("\n")
    assert check_edit(SRC, crlf) is None
    assert check_edit(SRC, SRC.replace("import triton", "import triton   ")) is None
    assert check_edit(SRC, SRC + "\n\n") is None


def test_edits_outside_are_rejected_with_the_line():
    reason = check_edit(SRC, SRC.replace("import triton", "import triton, os"))
    assert reason == "edit outside the EVOLVE-BLOCK (before it), at line 1: 'import triton, os'"
    reason = check_edit(SRC, SRC.replace("return helper(x)", "return 0"))
    assert reason is not None and "(after it), at line 16: 'return 0'" in reason
    reason = check_edit(SRC, SRC.replace("\n\ndef entry(x):\n    return helper(x)\n", "\n"))
    assert reason is not None and "end of file (fixed line 'def entry(x):' is missing)" in reason
    assert "malformed" in str(check_edit(SRC, SRC.replace("# EVOLVE-BLOCK-END", "")))
    assert "markers may not change" in str(check_edit("x = 1\n", SRC))  # whole-file parent
    inside = SRC.replace("return x * BLOCK_N", "return x + BLOCK_N")
    assert check_edit(SRC, inside) is None


def test_parse_and_set_knobs():
    knobs = parse_knobs(SRC)
    assert [(k.name, k.value, k.choices) for k in knobs] == [
        ("BLOCK_N", 64, (16, 32, 64, 128)),
        ("NUM_WARPS", 4, (2, 4, 8)),
        ("MODE", "fast", ("fast", "safe")),
    ]
    out = set_knobs(SRC, {"BLOCK_N": 128, "NUM_WARPS": 8, "MODE": "safe"})
    assert knob_values(out) == {"BLOCK_N": 128, "NUM_WARPS": 8, "MODE": "safe"}
    assert "NUM_WARPS: int = 8  # tune: 2, 4, 8" in out
    spaced = SRC.replace("BLOCK_N = 64  #", "BLOCK_N:int=  64 \t#")
    assert "BLOCK_N:int=  16 \t# tune" in set_knobs(spaced, {"BLOCK_N": 16})
    assert check_edit(SRC, out) is None
    with pytest.raises(BlockError, match="not a declared choice"):
        set_knobs(SRC, {"BLOCK_N": 48})
    with pytest.raises(BlockError, match="no knob named"):
        set_knobs(SRC, {"NUM_STAGES": 3})
    assert set_knobs(SRC.replace("\n", "\r\n"), {"BLOCK_N": 16}).count("\r\n") == SRC.count("\n")


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("A = 3  # tune: 1, 2", "not in its choices"),
        ("A = 1  # tune: 1, 1, 2", "lists a choice twice"),
        ("A = 1  # tune: 1, (", "bad tune declaration"),
        ("    A = 1  # tune: 1, 2", "not a module-level assignment"),
        ("A = 1  # tune: 1, 2\nA = 2  # tune: 1, 2", "declared twice"),
        ("A =   # tune: 1, 2", "not a module-level assignment"),  # no value
        ("A = 1  # tune:  ", "not a module-level assignment"),  # no choices
    ],
)
def test_malformed_knobs_fail_loudly(line, needle):
    src = f"# EVOLVE-BLOCK-START\n{line}\n# EVOLVE-BLOCK-END\n"
    with pytest.raises(BlockError, match=r"^line [23]: ") as err:
        parse_knobs(src)
    assert needle in str(err.value)


@pytest.mark.parametrize(
    "line",
    [
        "X" + " " * 20_000 + ":" + " " * 20_000 + "= 1",
        "X = " + " " * 100_000 + "1 # tune",
        "X: " + "a " * 50_000 + "= 1 #",
        "X = 1 # tune:" + " " * 100_000 + "x" + " " * 100_000,
    ],
)
def test_knob_lines_from_candidate_code_parse_in_linear_time(line):
    src = f"# EVOLVE-BLOCK-START\n{line}\n# EVOLVE-BLOCK-END\n"
    start = time.perf_counter()
    with contextlib.suppress(BlockError):
        parse_knobs(src)
    assert time.perf_counter() - start < 2.0  # a backtracking pattern took minutes at 10 KB


def test_knobs_outside_the_block_are_not_knobs():
    src = "A = 1  # tune: 1, 2\n# EVOLVE-BLOCK-START\nB = 2  # tune: 2, 3\n# EVOLVE-BLOCK-END\n"
    assert knob_values(src) == {"B": 2}


def test_knob_space_and_neighbours():
    space = knob_space(SRC)
    assert len(space) == knob_space_size(SRC) == 4 * 3 * 2
    assert space[0] == {"BLOCK_N": 16, "NUM_WARPS": 2, "MODE": "fast"}
    assert len({tuple(s.values()) for s in space}) == len(space)
    assert knob_neighbours(SRC) == [
        {"BLOCK_N": 32, "NUM_WARPS": 4, "MODE": "fast"},
        {"BLOCK_N": 128, "NUM_WARPS": 4, "MODE": "fast"},
        {"BLOCK_N": 64, "NUM_WARPS": 2, "MODE": "fast"},
        {"BLOCK_N": 64, "NUM_WARPS": 8, "MODE": "fast"},
        {"BLOCK_N": 64, "NUM_WARPS": 4, "MODE": "safe"},
    ]
    edge = knob_neighbours(SRC, {"BLOCK_N": 16, "NUM_WARPS": 8, "MODE": "safe"})
    assert len(edge) == 3
    assert knob_space("# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-END\n") == [{}]
