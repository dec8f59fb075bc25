"""A real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions protocol with scripted
answers, for the client and LLM-mutator tests.

Each scripted `Reply` is one HTTP answer (status, body, content type, headers, delay). Requests
are recorded (path, headers, JSON body). When the script runs out, `default` answers (a 500 by
default), so a test that sends more requests than it scripted fails loudly.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    body: str | bytes = ""
    status: int = 200
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    hang_up: bool = False  # close the connection without answering


def completion(
    text: str | None,
    prompt_tokens: int | None = 100,
    completion_tokens: int | None = 20,
    finish_reason: str = "stop",
) -> Reply:
    doc: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
    }
    if prompt_tokens is not None and completion_tokens is not None:
        doc["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
    return Reply(json.dumps(doc))


class ChatServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.responder: Callable[[dict[str, Any]], Reply] | None = None
        self.default = Reply(json.dumps({"error": {"message": "script exhausted"}}), status=500)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def add(self, *replies: Reply) -> None:
        self.script.extend(replies)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (timeout test) closes its socket; that is expected here."""


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        srv = self.server
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            body = {"unparsed": raw.decode(errors="replace")}
        with srv.lock:
            srv.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
            if srv.responder is not None:
                reply = srv.responder(body)
            else:
                reply = srv.script.popleft() if srv.script else srv.default
        try:
            if reply.delay_s:
                time.sleep(reply.delay_s)
        finally:
            # Counted out before the reply leaves: once the client has it, it may send the
            # next request at once, and that one must not find this one still counted.
            with srv.lock:
                srv.in_flight -= 1
        if reply.hang_up:
            self.close_connection = True
            return
        data = reply.body.encode() if isinstance(reply.body, str) else reply.body
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
