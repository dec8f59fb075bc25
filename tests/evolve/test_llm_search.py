"""The search with the LLM diff mutator against a local OpenAI-compatible stub: proposals,
token and cost accounting, prompt/response files and digests reach the database."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from evolve_fakes import FakeProblem

from evokernel.evolve.config import config_from_dict
from evokernel.evolve.session import create_session, resume_session


class _Handler(BaseHTTPRequestHandler):
    count = 0

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert body["model"] == "stub-model"
        _Handler.count += 1
        answer = (
            "Tag the function.\n<<<<<<< SEARCH\ndef f(x):\n=======\n"
            f"def f(x):  # variant {_Handler.count}\n>>>>>>> REPLACE\n"
        )
        doc = {
            "choices": [{"message": {"role": "assistant", "content": answer}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 50},
        }
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_llm_diff_search_accounts_tokens_and_cost(tmp_path, endpoint):
    cfg = config_from_dict(
        {
            "islands": {"count": 2},
            "mutators": {"weights": {"llm_diff": 1.0}},
            "llm": {
                "api_base": endpoint,
                "models": [
                    {
                        "name": "stub-model",
                        "prompt_usd_per_mtok": 1.0,
                        "completion_usd_per_mtok": 2.0,
                    }
                ],
                "max_concurrency": 2,
            },
            "budget": {"iterations": 4},
        }
    )
    session = create_session(tmp_path / "run", FakeProblem(), cfg)
    try:
        out = session.execute(stream=io.StringIO(), live=False)
        rows = [p for p in session.db.programs if p.iteration >= 0]
        assert session.db.meta("lag") == 3  # one evaluation worker + two LLM requests
    finally:
        session.close()
    assert out.summary.iterations_done == 4 and out.summary.valid >= 4
    assert out.summary.tokens == 4 * 150
    assert out.summary.cost_usd == pytest.approx(4 * (100 * 1.0 + 50 * 2.0) / 1e6)
    assert out.summary.by_model["stub-model"]["prompt_tokens"] == 400
    for p in rows:
        assert p.kind == "llm:diff" and p.status == "ok", p.reasons
        assert len(p.prompt_digest) == 64 and len(p.response_digest) == 64
        assert (tmp_path / "run" / "llm" / f"{p.id}.prompt.txt").exists()
        assert "variant" in (tmp_path / "run" / "llm" / f"{p.id}.response.txt").read_text()

    session = resume_session(tmp_path / "run", iterations=5, problem=FakeProblem())
    try:
        assert session.build_mutators().accounting.total().tokens == 600  # the tally survives
    finally:
        session.close()
