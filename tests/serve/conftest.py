"""A tiny checkpoint with a chat template, and one shared server for the client tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("uvicorn", reason="the serve tests need the serve extra")

from server_proc import MAX_LEN, ServerProcess

from evokernel.model.random import write_random_checkpoint
from evokernel.serve.chat_template import BUILT_IN


@pytest.fixture(scope="session")
def tiny_chat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `tiny` preset in float32 whose tokenizer_config.json carries a ChatML template with
    Qwen3's think block, as a hub Qwen3 checkpoint carries its own."""
    out = write_random_checkpoint(
        tmp_path_factory.mktemp("tiny-chat"), "tiny", seed=0, dtype="float32"
    )
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = BUILT_IN["chatml"].read_text()
    config_path.write_text(json.dumps(config, indent=2))
    return out


@pytest.fixture(scope="session")
def server(tiny_chat: Path) -> Iterator[ServerProcess]:
    """One server for the tests that only talk to it: 8 slots, 512 positions."""
    with ServerProcess(
        ["--model", str(tiny_chat), "--max-batch", "8", "--max-len", str(MAX_LEN)]
    ) as proc:
        yield proc


@pytest.fixture
def client(server: ServerProcess):
    openai = pytest.importorskip("openai", reason="the client tests need the test extra (openai)")

    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as c:
        yield c
