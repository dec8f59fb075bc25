"""The chat client against a real local HTTP server: answers, failures, retries, timeouts,
accounting, budgets and concurrency."""

from __future__ import annotations

import email.utils
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from chat_server import ChatServer, Reply, completion

from evokernel.evolve.llm.accounting import Accounting
from evokernel.evolve.llm.client import ChatClient, _retry_after
from evokernel.evolve.llm.config import LLMBudget, LLMConfig, ModelSpec
from evokernel.evolve.types import BudgetExceeded, text_digest

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]


def make_client(
    server: ChatServer, *, budget: LLMBudget | None = None, **overrides
) -> tuple[ChatClient, list[float]]:
    model = ModelSpec(
        "m-fast", prompt_usd_per_mtok=1.0, completion_usd_per_mtok=2.0, extra_body={"seed": 7}
    )
    fields = {"api_base": server.api_base, "models": [model], "retries": 2, "timeout_s": 5.0}
    fields.update(overrides)
    sleeps: list[float] = []
    client = ChatClient(LLMConfig(**fields), Accounting(budget), sleep=sleeps.append, jitter_seed=0)
    return client, sleeps


def test_answer_usage_cost_digests_and_request_shape(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    server.add(completion("the answer", prompt_tokens=1000, completion_tokens=500))
    client, sleeps = make_client(server)
    reply = client.chat(MESSAGES, client.config.models[0])
    assert reply.ok and reply.text == "the answer" and reply.attempts == 1 and not sleeps
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (1000, 500)
    assert reply.usage.cost_usd == pytest.approx(1000 * 1e-6 + 500 * 2e-6)
    assert reply.response_digest == text_digest("the answer")
    assert len(reply.prompt_digest) == 64
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == "Bearer sk-test"
    assert req["body"]["model"] == "m-fast" and req["body"]["messages"] == MESSAGES
    assert req["body"]["max_tokens"] == 8192 and req["body"]["seed"] == 7
    total = client.accounting.total()
    assert (total.requests, total.prompt_tokens, total.completion_tokens) == (1, 1000, 500)


def test_no_key_no_auth_header(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.add(completion("ok"))
    client, _ = make_client(server)
    assert client.chat(MESSAGES, client.config.models[0]).ok
    assert "Authorization" not in server.requests[0]["headers"]


def test_429_with_retry_after_then_success(server):
    server.add(
        Reply(json.dumps({"error": {"message": "slow down"}}), 429, headers={"Retry-After": "3"}),
        completion("fine"),
    )
    client, sleeps = make_client(server)
    reply = client.chat(MESSAGES, client.config.models[0])
    assert reply.ok and reply.text == "fine" and reply.attempts == 2
    assert sleeps == [3.0]
    assert "HTTP 429" in reply.history[0] and "slow down" in reply.history[0]


def test_500_then_success_uses_backoff(server):
    server.add(Reply("oops", 500, content_type="text/plain"), completion("fine"))
    client, sleeps = make_client(server, backoff_base_s=2.0)
    reply = client.chat(MESSAGES, client.config.models[0])
    assert reply.ok and reply.attempts == 2
    assert len(sleeps) == 1 and 1.0 <= sleeps[0] < 3.0  # base * 2**0 * U(0.5, 1.5)


def test_backoff_grows_and_is_capped(server):
    client, _ = make_client(server, backoff_base_s=1.0, backoff_max_s=5.0)
    delays = [client._delay(n, None) for n in range(8)]
    assert delays[0] < 1.5 and delays[2] >= 2.0 and max(delays) <= 5.0
    assert client._delay(0, 120.0) == 5.0  # Retry-After is capped too


def test_repeated_500_fails_after_retries(server):
    server.add(*[Reply(json.dumps({"error": {"message": "down"}}), 503) for _ in range(3)])
    client, sleeps = make_client(server, retries=2)
    reply = client.chat(MESSAGES, client.config.models[0])
    assert not reply.ok and reply.attempts == 3 and len(sleeps) == 2
    assert "HTTP 503" in reply.error and "down" in reply.error and "after 3 attempts" in reply.error
    assert "\n" not in reply.error
    assert len(server.requests) == 3
    assert client.accounting.total().failures == 1


def test_4xx_is_not_retried(server):
    server.add(Reply(json.dumps({"error": {"message": "context too long"}}), 400))
    client, sleeps = make_client(server)
    reply = client.chat(MESSAGES, client.config.models[0])
    assert not reply.ok and reply.attempts == 1 and not sleeps
    assert "HTTP 400" in reply.error and "context too long" in reply.error


def test_slow_answer_times_out_then_retry_succeeds(server):
    server.add(Reply(completion("late").body, delay_s=1.5), completion("on time"))
    client, _ = make_client(server, timeout_s=0.3)
    t0 = time.monotonic()
    reply = client.chat(MESSAGES, client.config.models[0])
    assert reply.ok and reply.text == "on time" and reply.attempts == 2
    assert "no complete answer within 0.3 s" in reply.history[0]
    assert time.monotonic() - t0 < 1.4


def test_slow_answers_exhaust_retries(server):
    server.add(*[Reply(completion("late").body, delay_s=1.0) for _ in range(2)])
    client, _ = make_client(server, timeout_s=0.2, retries=1)
    reply = client.chat(MESSAGES, client.config.models[0])
    assert not reply.ok and "no complete answer within 0.2 s" in reply.error


def test_connection_refused_is_an_error_line(server):
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    client, sleeps = make_client(server, api_base=f"http://127.0.0.1:{port}/v1", retries=1)
    reply = client.chat(MESSAGES, client.config.models[0])
    assert not reply.ok and "cannot reach" in reply.error and len(sleeps) == 1


def test_dropped_connection_is_retried(server):
    server.add(Reply(hang_up=True), completion("back"))
    client, sleeps = make_client(server)
    reply = client.chat(MESSAGES, client.config.models[0])
    assert reply.ok and reply.text == "back" and len(sleeps) == 1
    assert "connection failed" in reply.history[0] or "cannot reach" in reply.history[0]


def test_retry_after_as_http_date():
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < _retry_after(when) <= 30
    assert (
        _retry_after("2.5") == 2.5 and _retry_after("soon") is None and _retry_after(None) is None
    )


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (
            Reply(
                "<html><title>502 Bad Gateway</title><body>nginx</body></html>",
                200,
                content_type="text/html",
            ),
            "text/html",
        ),
        (
            Reply("<html><title>Service Unavailable</title></html>", 503, content_type="text/html"),
            "Service Unavailable",
        ),
        (Reply("plain words", 200, content_type="text/plain"), "text/plain"),
        (Reply("{not json", 200), "malformed JSON"),
        (Reply("[1, 2]", 200), "not an object"),
        (Reply(json.dumps({"id": "x"}), 200), "no choices"),
        (Reply(json.dumps({"choices": []}), 200), "no choices"),
        (Reply(json.dumps({"choices": [{"message": {"content": 42}}]}), 200), "not text"),
        (Reply(json.dumps({"error": {"message": "model not found"}}), 200), "model not found"),
    ],
)
def test_bad_answers_are_one_line_errors(server, reply, needle):
    server.add(*[reply] * 3)
    client, _ = make_client(server)
    out = client.chat(MESSAGES, client.config.models[0])
    assert not out.ok and needle in out.error and "\n" not in out.error
    assert out.text == ""


def test_empty_content_retried_and_cut_off_answer_not(server):
    server.add(completion(""), completion("second try"))
    client, _ = make_client(server)
    assert client.chat(MESSAGES, client.config.models[0]).text == "second try"
    server.add(completion(None, finish_reason="length"))
    out = client.chat(MESSAGES, client.config.models[0])
    assert not out.ok and out.attempts == 1 and "finish_reason=length" in out.error


def test_content_parts_and_json_with_odd_content_type(server):
    doc = {"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"text": "b"}]}}]}
    server.add(Reply(json.dumps(doc), content_type="text/plain; charset=utf-8"))
    client, _ = make_client(server)
    out = client.chat(MESSAGES, client.config.models[0])
    assert out.ok and out.text == "ab"


def test_odd_text_in_the_answer_is_text_and_never_an_exception(server):
    parts = [{"text": "a"}, {"text": 5}, {"text": None}, "b", {"type": "image"}]
    server.add(Reply(json.dumps({"choices": [{"message": {"content": parts}}]})))
    # a lone surrogate, escaped in JSON: nothing downstream (digests, database) could encode it
    server.add(Reply('{"choices": [{"message": {"content": "x = \'\\ud800\'"}}]}'))
    client, _ = make_client(server)
    assert client.chat(MESSAGES, client.config.models[0]).text == "a"
    out = client.chat(MESSAGES, client.config.models[0])
    assert out.ok and out.text == "x = '?'" and out.response_digest == text_digest("x = '?'")


def test_missing_usage_is_estimated(server):
    server.add(completion("x" * 300, prompt_tokens=None, completion_tokens=None))
    client, _ = make_client(server)
    out = client.chat(MESSAGES, client.config.models[0])
    assert out.ok and out.usage_estimated
    assert out.usage.completion_tokens == 100 and out.usage.prompt_tokens > 0
    assert client.accounting.total().estimated == 1


def test_usage_of_failed_attempts_is_counted(server):
    server.add(completion("", 50, 0), completion("ok", 60, 10))
    client, _ = make_client(server)
    out = client.chat(MESSAGES, client.config.models[0])
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (110, 10)
    assert client.accounting.total().tokens == 120


def test_token_budget_stops_before_sending(server):
    server.add(completion("one", 400, 100), completion("two", 400, 100))
    # each request reserves its worst case: ~10 prompt tokens + max_tokens 500
    client, _ = make_client(server, budget=LLMBudget(tokens=1400), max_tokens=500)
    model = client.config.models[0]
    assert client.chat(MESSAGES, model).ok  # 0 + 510 <= 1400; 500 spent
    assert client.chat(MESSAGES, model).ok  # 500 + 510 <= 1400; 1000 spent
    with pytest.raises(BudgetExceeded, match="token budget"):
        client.chat(MESSAGES, model)  # 1000 + 510 > 1400: nothing is sent
    assert len(server.requests) == 2
    assert client.accounting.exhausted() == ""


def test_money_budget(server):
    server.add(completion("one", 1000, 1000))
    client, _ = make_client(server, budget=LLMBudget(cost_usd=0.02), max_tokens=1000)
    model = client.config.models[0]
    assert client.chat(MESSAGES, model).ok  # $0.003
    server.add(completion("two", 10_000, 10_000))
    assert client.chat(MESSAGES, model).ok  # $0.03 in all: past the limit
    assert "money budget spent" in client.accounting.exhausted()
    with pytest.raises(BudgetExceeded, match="money budget"):
        client.chat(MESSAGES, model)
    assert len(server.requests) == 2


def test_concurrent_requests_respect_the_limit_and_count_exactly(server):
    server.responder = lambda body: Reply(
        completion(body["messages"][-1]["content"], 7, 3).body, delay_s=0.05
    )
    client, _ = make_client(server, max_concurrency=3)
    model = client.config.models[0]

    def ask(i: int) -> str:
        return client.chat([{"role": "user", "content": f"q{i}"}], model).text

    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(ask, range(24)))
    assert answers == [f"q{i}" for i in range(24)]
    assert server.max_in_flight <= 3
    total = client.accounting.total()
    assert (total.requests, total.prompt_tokens, total.completion_tokens) == (24, 168, 72)
