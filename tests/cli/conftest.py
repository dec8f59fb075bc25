"""Random checkpoints for the CLI tests, and a pack key of the tests' own (tune signs the
packs it writes: no test reads or writes the user's key)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from evokernel.engine.packs.trust import KEY_ENV
from evokernel.model.random import write_random_checkpoint


@pytest.fixture(scope="session", autouse=True)
def pack_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("config") / "evokernel" / "pack-key"
    before = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = str(path)
    yield path
    if before is None:
        os.environ.pop(KEY_ENV, None)
    else:
        os.environ[KEY_ENV] = before


@pytest.fixture(scope="session")
def tiny_fp32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `tiny` preset in float32, with a tokenizer (read-only: copy it to spoil it)."""
    return write_random_checkpoint(tmp_path_factory.mktemp("tiny"), "tiny", seed=0, dtype="float32")
