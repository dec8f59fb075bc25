"""Fixtures of the LLM tests: a scripted OpenAI-compatible server (chat_server.py) per test,
and the toy candidate file the mutators edit."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from chat_server import ChatServer

TOY = Path(__file__).resolve().parents[1] / "mutators" / "toy_kernel.py"


@pytest.fixture
def server() -> Iterator[ChatServer]:
    srv = ChatServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def toy_source() -> str:
    return TOY.read_text()
