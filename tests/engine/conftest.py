"""Random checkpoints shared by the engine tests (written once per session, read-only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evokernel.model.random import write_random_checkpoint


@pytest.fixture(scope="session")
def tiny_fp32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `tiny` preset (GQA 4:2, head_dim 32, tied) stored in float32, with a tokenizer."""
    return write_random_checkpoint(tmp_path_factory.mktemp("tiny"), "tiny", seed=0, dtype="float32")


@pytest.fixture(scope="session")
def tiny_gqa3_untied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GQA 6:2, head_dim 64 (q width 384 != hidden 64), untied lm_head, 3 layers."""
    return write_random_checkpoint(
        tmp_path_factory.mktemp("gqa3"),
        "tiny",
        seed=3,
        dtype="float32",
        heads=6,
        kv_heads=2,
        head_dim=64,
        layers=3,
        untied=True,
    )


@pytest.fixture(scope="session")
def tiny_no_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random_checkpoint(
        tmp_path_factory.mktemp("notok"), "tiny", seed=0, dtype="float32", tokenizer=False
    )
