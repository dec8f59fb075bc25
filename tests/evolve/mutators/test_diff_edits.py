"""Parsing SEARCH/REPLACE edits out of answers, and applying them inside the EVOLVE-BLOCK."""

from __future__ import annotations

import pytest

from evokernel.evolve.mutators.diff import Edit, apply_edits, parse_edits
from evokernel.tasks.blocks import check_edit

SRC = """import torch

# EVOLVE-BLOCK-START
BLOCK = 64  # tune: 32, 64


def body(x):
    if x:
        y = x + 1
        z = y * 2
    acc = 1
    acc = 10
    return z
# EVOLVE-BLOCK-END


def entry(x):
    y = x + 1
    return body(x)
"""


def edit(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def test_parse_tolerates_prose_fences_marker_lengths_and_crlf():
    answer = (
        "Change: two things.\nHere is the diff:\n```diff\n"
        + edit("a = 1", "a = 2")
        + "```\nand\n<<<<<<<<< SEARCH\r\n```python\r\nb = 1\r\n```\r\n=========\r\n"
        "```python\r\nb = 2\r\n```\r\n>>>>>>>>> REPLACE\r\nthanks"
    )
    parsed = parse_edits(answer)
    assert parsed.problems == []
    assert parsed.edits == [Edit("a = 1", "a = 2"), Edit("b = 1", "b = 2")]


def test_parse_reports_unfinished_edits():
    assert "divider" in parse_edits("<<<<<<< SEARCH\na\n>>>>>>> REPLACE").problems[0]
    assert (
        "missing '>>>>>>> REPLACE'"
        in parse_edits(
            "<<<<<<< SEARCH\na\n=======\nb\n<<<<<<< SEARCH\nc\n=======\nd\n>>>>>>> REPLACE"
        ).problems[0]
    )
    assert "cut off" in parse_edits("<<<<<<< SEARCH\na\n=======\nb").problems[0]
    assert parse_edits("no edits at all").edits == []


def test_exact_edit_and_several_in_order():
    out = apply_edits(
        SRC, [Edit("        z = y * 2", "        z = y * 3"), Edit("z = y * 3", "z = y * 4")]
    )
    assert out.error == "" and out.code is not None and out.fuzzy == 0
    assert "z = y * 4" in out.code and check_edit(SRC, out.code) is None


def test_partial_line_match_does_not_cut_numbers():
    out = apply_edits(SRC, [Edit("acc = 1", "acc = 2")])
    assert out.code is not None
    assert "    acc = 2\n    acc = 10\n" in out.code


def test_search_only_in_fixed_code_is_refused():
    out = apply_edits(SRC, [Edit("    return body(x)", "    return 0")])
    assert out.code is None
    assert "'return body(x)' is in the fixed code outside the EVOLVE-BLOCK" in out.error


def test_match_inside_block_wins_over_a_twin_outside():
    out = apply_edits(SRC, [Edit("        y = x + 1", "        y = x - 1")])
    assert out.code is not None and "    y = x + 1\n    return body(x)" in out.code


def test_not_found_names_the_search_and_the_closest_line():
    out = apply_edits(SRC, [Edit("z = y * 5", "z = 0"), Edit("a", "b")])
    assert out.code is None
    assert out.error.startswith("edit 1 of 2: SEARCH text not found in the EVOLVE-BLOCK")
    assert "'z = y * 5'" in out.error and "closest block line 10: 'z = y * 2'" in out.error


def test_all_or_nothing():
    out = apply_edits(SRC, [Edit("BLOCK = 64", "BLOCK = 32"), Edit("missing()", "x")])
    assert out.code is None and out.error.startswith("edit 2 of 2")


def test_trailing_whitespace_and_indentation_fallbacks():
    out = apply_edits(SRC, [Edit("    if x:   \n        y = x + 1   ", "    if x:\n        y = 0")])
    assert out.code is not None and "        y = 0\n" in out.code and out.fuzzy == 1
    dedented = apply_edits(SRC, [Edit("y = x + 1\nz = y * 2", "y = x + 2\nif y:\n    z = y")])
    assert dedented.code is not None
    assert "        y = x + 2\n        if y:\n            z = y\n" in dedented.code


def test_whitespace_insensitive_fallback_skips_blank_lines():
    out = apply_edits(SRC, [Edit("acc=1\n\n\nacc  =  10", "acc = 5")])
    assert out.code is not None and "    acc = 5\n    return z" in out.code


def test_ambiguous_search_fails():
    src = SRC.replace("    acc = 10\n", "    acc = 1\n")
    out = apply_edits(src, [Edit("    acc = 1", "    acc = 3")])
    assert out.code is None and "matches 2 places" in out.error


def test_markers_at_the_edges_are_dropped_and_removal_refused():
    ok = apply_edits(
        SRC, [Edit("# EVOLVE-BLOCK-START\nBLOCK = 64", "# EVOLVE-BLOCK-START\nBLOCK = 32")]
    )
    assert ok.code is not None and "\nBLOCK = 32" in ok.code
    bad = apply_edits(SRC, [Edit("    return z\n# EVOLVE-BLOCK-END", "    return z")])
    assert bad.code is None and "remove the '# EVOLVE-BLOCK-END' marker" in bad.error


def test_empty_and_no_op_edits():
    assert "empty SEARCH" in apply_edits(SRC, [Edit("", "x = 1")]).error
    assert apply_edits(SRC, [Edit("BLOCK = 64", "BLOCK = 64")]).error == "the edits change nothing"
    assert apply_edits(SRC, []).error == "no SEARCH/REPLACE edit found"


def test_crlf_source_keeps_its_line_ends():
    crlf = SRC.replace("\n", "\r\n")
    out = apply_edits(crlf, [Edit("z = y * 2", "z = y * 3")])
    assert (
        out.code is not None
        and "z = y * 3\r\n" in out.code
        and "\n" not in out.code.replace("\r\n", "")
    )


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ("# EVOLVE-BLOCK-START\nx\n", "has no '# EVOLVE-BLOCK-END'"),
        ("# EVOLVE-BLOCK-END\nx\n", "markers must alternate"),
    ],
)
def test_malformed_parent(bad, needle):
    out = apply_edits(bad, [Edit("x", "y")])
    assert out.code is None and needle in out.error


def test_a_program_without_markers_is_edited_anywhere():
    assert apply_edits("x = 1\ny = 2\n", [Edit("y = 2", "y = 3")]).code == "x = 1\ny = 3\n"


def test_edits_reach_every_block_of_a_program_with_several():
    src = "# EVOLVE-BLOCK-START\na = 1\n# EVOLVE-BLOCK-END\nfixed = 0\n"
    src += "# EVOLVE-BLOCK-START\nb = 2\n# EVOLVE-BLOCK-END\n"
    out = apply_edits(src, [Edit("a = 1", "a = 5"), Edit("b = 2", "b = 6")])
    assert out.code == src.replace("a = 1", "a = 5").replace("b = 2", "b = 6")
    assert "fixed code" in apply_edits(src, [Edit("fixed = 0", "fixed = 1")]).error
