"""Random checkpoints for the kernel-pack tests (written once per session, read-only), and a
pack key of the tests' own (engine/packs/trust.py), so no test reads or writes the user's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from evokernel.engine.packs.trust import KEY_ENV
from evokernel.model.random import write_random_checkpoint


@pytest.fixture(scope="session", autouse=True)
def pack_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This session's pack key file (created by the first signature); subprocesses inherit
    the variable."""
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
    """The `tiny` preset in float32, with a tokenizer."""
    return write_random_checkpoint(tmp_path_factory.mktemp("tiny"), "tiny", seed=0, dtype="float32")


@pytest.fixture(scope="session")
def tiny_wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tiny` with another layer shape (head_dim 64): a pack for `tiny_fp32` does not fit it."""
    return write_random_checkpoint(
        tmp_path_factory.mktemp("wide"), "tiny", seed=1, dtype="float32", head_dim=64
    )
