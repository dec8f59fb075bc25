"""pysource: every AST built by the package goes through one lock (CPython 3.11's AST
construction is not safe from two threads at once)."""

from __future__ import annotations

import gc
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from evokernel import pysource

SRC = Path(__file__).resolve().parents[1] / "src" / "evokernel"


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


def _parse_from_threads(parse: Callable[[str], object]) -> list[str]:
    """Errors of 4 threads parsing 20 times each while the interpreter switches threads in
    the middle of tree construction: a collection after every allocation, whose callback
    releases the GIL (how a real process gets there, only more often)."""
    source = "\n".join(f"def f{i}(x):\n    return [(x, {{'k': [x + {i}]}})]" for i in range(200))
    errors: list[str] = []

    def work() -> None:
        try:
            for _ in range(20):
                parse(source)
        except BaseException as err:  # reported below
            errors.append(repr(err))

    def switch(phase: str, info: dict) -> None:
        time.sleep(0)

    interval, threshold = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(1, 1, 1)
    gc.callbacks.append(switch)
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gc.callbacks.remove(switch)
        gc.set_threshold(*threshold)
        sys.setswitchinterval(interval)
    return errors


def test_parse_holds_under_thread_switches_inside_tree_construction() -> None:
    # Unlocked (ast.parse) this fails with "AST constructor recursion depth mismatch" on
    # CPython 3.11 in nearly every run.
    assert _parse_from_threads(pysource.parse) == []
    assert pysource.literal_eval("(1, [2.5, 'x'], {'a': (None,)})")[1] == [2.5, "x"]
