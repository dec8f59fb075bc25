"""Behaviour under load and faults, each on a server of its own: a full queue answers 429 with
Retry-After, a client that leaves has its sequence cancelled, SIGTERM drains in-flight requests
(finishing what fits the deadline, cancelling the rest) and exits 0, an API key is required
and never logged. Every server is checked to leave no process and no port behind."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import threading
import time

import httpx
import pytest

openai = pytest.importorskip("openai", reason="the test extra (openai) drives the server")

from server_proc import ServerProcess, port_free  # noqa: E402

LONG = {"prompt": [1, 2], "max_tokens": 4000, "temperature": 0, "ignore_eos": True}  # seconds


def metric(server: ServerProcess, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", httpx.get(server.url + "/metrics").text, re.M)
    assert found, name
    return float(found[1])


def wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def model_of(server: ServerProcess) -> str:
    return httpx.get(server.url + "/v1/models").json()["data"][0]["id"]


class Stream:
    """A streaming request whose first event has arrived (so it holds a slot). Keep it
    referenced: dropping its line iterator closes the connection, which cancels it."""

    def __init__(self, server: ServerProcess, body: dict) -> None:
        self.client = httpx.Client(timeout=60)
        payload = {"model": model_of(server), "stream": True} | body
        request = self.client.build_request("POST", server.url + "/v1/completions", json=payload)
        self.response = self.client.send(request, stream=True)
        assert self.response.status_code == 200
        self.lines = self.response.iter_lines()
        next(self.lines)

    def close(self) -> None:
        self.response.close()
        self.client.close()


@pytest.fixture(scope="module")
def one_slot(tiny_chat):
    """One KV slot and a queue of one: the third concurrent request is refused."""
    args = ["--model", str(tiny_chat), "--max-batch", "1", "--max-queue", "1", "--max-len", "4096"]
    with ServerProcess(args) as proc:
        yield proc


def test_beyond_the_queue_requests_get_429_with_retry_after(one_slot):
    running = Stream(one_slot, LONG)
    c2 = httpx.Client(timeout=60)  # queued: its headers come only when it runs, so no wait

    def queue_one() -> None:
        with contextlib.suppress(httpx.HTTPError):  # closed by the test below
            c2.post(one_slot.url + "/v1/completions", json={"model": model_of(one_slot)} | LONG)

    queued = threading.Thread(target=queue_one, daemon=True)
    queued.start()
    wait_for(lambda: metric(one_slot, "evokernel_queue_depth") == 1)
    body = {"model": model_of(one_slot), "prompt": "x", "max_tokens": 1}
    refused = httpx.post(one_slot.url + "/v1/completions", json=body)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    err = refused.json()["error"]
    assert err["type"] == "rate_limit_error" and "--max-queue 1" in err["message"]
    client = openai.OpenAI(base_url=one_slot.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.RateLimitError):
        client.completions.create(model=body["model"], prompt="x", max_tokens=1)
    running.close()
    c2.close()
    wait_for(lambda: metric(one_slot, "evokernel_running_requests") == 0)


def test_a_client_that_leaves_has_its_sequence_cancelled(one_slot):
    cancelled = metric(one_slot, "evokernel_requests_cancelled_total")
    stream = Stream(one_slot, LONG)
    for _ in range(3):
        next(stream.lines)
    stream.close()
    wait_for(lambda: metric(one_slot, "evokernel_requests_cancelled_total") == cancelled + 1)
    wait_for(lambda: metric(one_slot, "evokernel_running_requests") == 0)
    tokens = metric(one_slot, "evokernel_generation_tokens_total")
    time.sleep(0.5)
    assert metric(one_slot, "evokernel_generation_tokens_total") == tokens  # it stopped
    # the slot is free again: the next request runs at once
    body = {"model": model_of(one_slot), "prompt": "x", "max_tokens": 2}
    assert httpx.post(one_slot.url + "/v1/completions", json=body, timeout=30).status_code == 200


def test_a_non_streaming_client_that_leaves_is_cancelled_too(one_slot):
    cancelled = metric(one_slot, "evokernel_requests_cancelled_total")
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            one_slot.url + "/v1/completions", json={"model": model_of(one_slot)} | LONG, timeout=0.5
        )
    wait_for(lambda: metric(one_slot, "evokernel_requests_cancelled_total") == cancelled + 1)
    wait_for(lambda: metric(one_slot, "evokernel_running_requests") == 0)


def test_sigterm_finishes_what_fits_the_deadline_cancels_the_rest_and_exits_0(tiny_chat):
    args = ["--model", str(tiny_chat), "--max-batch", "2", "--max-len", "4096"]
    server = ServerProcess([*args, "--shutdown-timeout", "1"]).start()
    try:
        long_stream = Stream(server, LONG)  # thousands of tokens: more than the deadline
        short_stream = Stream(server, {**LONG, "max_tokens": 16})  # done well within it
        t0 = time.monotonic()
        code = server.stop(signal.SIGTERM, timeout_s=30)
        took = time.monotonic() - t0
        assert code == 0, server.log()
        assert took < 15
        short_lines = [line for line in short_stream.lines if line]
        assert short_lines[-1] == "data: [DONE]"
        assert json.loads(short_lines[-2][6:])["choices"][0]["finish_reason"] == "length"
        lines: list[str] = []
        with pytest.raises(httpx.RemoteProtocolError):  # cut at the deadline, not finished
            lines.extend(long_stream.lines)
        assert "data: [DONE]" not in lines
        for stream in (short_stream, long_stream):
            stream.close()
        with pytest.raises(httpx.ConnectError):
            httpx.get(server.url + "/health")
        assert port_free(server.port)
    finally:
        server.kill()


def test_an_api_key_is_required_and_never_logged(tiny_chat):
    key = "sk-test-4f1b9e2a7c"
    args = ["--model", str(tiny_chat), "--api-key-env", "EVK_TEST_KEY", "--access-log"]
    server = ServerProcess(args, env={"EVK_TEST_KEY": key}).start()
    try:
        name = model_of_with_key(server, key)
        body = {"model": name, "prompt": "k", "max_tokens": 2}
        url = server.url + "/v1/completions"
        missing = httpx.post(url, json=body)
        wrong = httpx.post(url, json=body, headers={"Authorization": "Bearer nope"})
        for r in (missing, wrong):
            assert r.status_code == 401
            assert r.json()["error"]["type"] == "authentication_error"
        assert httpx.get(server.url + "/v1/models").status_code == 401
        assert httpx.get(server.url + "/health").status_code == 200
        ok = httpx.post(url, json=body, headers={"Authorization": f"Bearer {key}"})
        assert ok.status_code == 200
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)
        assert client.completions.create(model=name, prompt="k", max_tokens=1).usage
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=server.url + "/v1", api_key="bad", max_retries=0).models.list()
        assert server.stop() == 0
        printed = server.log() + "".join(server.stdout)
        assert "POST /v1/completions" in printed  # the access log ran
        assert key not in printed
    finally:
        server.kill()


def model_of_with_key(server: ServerProcess, key: str) -> str:
    doc = httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {key}"}).json()
    return str(doc["data"][0]["id"])


def test_the_health_and_metrics_endpoints_answer(one_slot):
    assert httpx.get(one_slot.url + "/health").json() == {"status": "ok"}
    text = httpx.get(one_slot.url + "/metrics").text
    assert "# TYPE evokernel_inter_token_latency_seconds histogram" in text
    json.dumps(text)  # plain text
