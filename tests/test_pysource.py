"""pysource: every AST built by the package goes through one lock (CPython 3.11's AST
construction is not safe from two threads at once)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from evokernel import pysource

SRC = Path(__file__).resolve().parents[1] / "src" / "evokernel"
SOURCE = "\n".join(f"def f{i}(x):\n    return [(x, {{'k': [x + {i}]}})]" for i in range(50))


def test_no_module_builds_trees_past_the_lock() -> None:
    direct = re.compile(r"\bast\.(parse|literal_eval)\(")
    offenders = [
        f"{path.relative_to(SRC)}:{n}"
        for path in SRC.rglob("*.py")
        if path.name != "pysource.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if direct.search(line)
    ]
    assert offenders == []


def test_parse_and_literal_eval_from_many_threads() -> None:
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(40):
                assert len(pysource.parse(SOURCE).body) == 50
                assert pysource.literal_eval("(1, [2.5, 'x'], {'a': (None,)})")[1] == [2.5, "x"]
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
