"""Fixtures of the mutator tests: the toy candidate (toy_kernel.py, read as text)."""

from __future__ import annotations

from pathlib import Path

import pytest

TOY = Path(__file__).with_name("toy_kernel.py")


@pytest.fixture
def toy_source() -> str:
    return TOY.read_text()
