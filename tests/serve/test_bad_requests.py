"""Each bad request gets its status and OpenAI's JSON error body, naming the field."""

from __future__ import annotations

import httpx
import pytest

openai = pytest.importorskip("openai", reason="the test extra (openai) drives the server")

from server_proc import MAX_LEN  # noqa: E402


@pytest.fixture
def post(server):
    name = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]

    def send(path: str, body: object, raw: bytes | None = None) -> httpx.Response:
        if isinstance(body, dict):
            body = {"model": name} | body
        content = raw if raw is not None else httpx.Request("POST", "/", json=body).content
        return httpx.post(server.url + path, content=content, timeout=30)

    return send


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    err = response.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("path", "body", "param", "words"),
    [
        ("/v1/completions", {"prompt": "x", "max_tokens": "many"}, "max_tokens", "integer"),
        ("/v1/completions", {"prompt": "x", "temperature": -1}, "temperature", "greater"),
        ("/v1/completions", {"prompt": "x", "top_p": 0}, "top_p", "greater"),
        ("/v1/completions", {"max_tokens": 3}, "prompt", "required"),
        ("/v1/completions", {"prompt": "x", "n": 2}, "n", "one choice"),
        ("/v1/completions", {"prompt": ["a", "b"]}, "prompt", "one prompt"),
        ("/v1/completions", {"prompt": [1, 999999]}, "prompt", "outside the vocabulary"),
        ("/v1/completions", {"prompt": ""}, "prompt", "empty"),
        (
            "/v1/completions",
            {"prompt": "x", "stream_options": {"include_usage": True}},
            "stream_options",
            "stream: true",
        ),
        ("/v1/chat/completions", {"messages": []}, "messages", "at least 1"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "robot", "content": "x"}]},
            "messages.0.role",
            "system",
        ),
        (
            "/v1/chat/completions",
            CHAT | {"tools": [{"type": "function"}]},
            "tools",
            "not supported",
        ),
        (
            "/v1/chat/completions",
            CHAT | {"presence_penalty": 1},
            "presence_penalty",
            "not supported",
        ),
        ("/v1/chat/completions", CHAT | {"top_logprobs": 2}, "top_logprobs", "logprobs"),
        (
            "/v1/chat/completions",
            CHAT | {"chat_template_kwargs": {"messages": 1}},
            "chat_template_kwargs",
            "messages",
        ),
    ],
)
def test_a_malformed_body_gets_400_with_the_field(post, path, body, param, words):
    err = error_of(post(path, body), 400)
    assert err["param"] == param and err["type"] == "invalid_request_error"
    assert words in err["message"], err["message"]


def test_a_body_that_is_not_json_gets_400(post):
    err = error_of(post("/v1/completions", None, raw=b"{not json"), 400)
    assert "not valid JSON" in err["message"]
    err = error_of(post("/v1/completions", None, raw=b"[1, 2]"), 400)
    assert "JSON object" in err["message"]


def test_a_prompt_longer_than_the_context_gets_400_with_the_numbers(post):
    err = error_of(post("/v1/completions", {"prompt": [5] * 500, "max_tokens": 20}), 400)
    assert err["code"] == "context_length_exceeded" and err["param"] == "prompt"
    assert f"maximum context length is {MAX_LEN}" in err["message"]
    assert "520 tokens (500 in the prompt, 20 in the completion)" in err["message"]
    err = error_of(post("/v1/completions", {"prompt": [5] * MAX_LEN}), 400)
    assert f"{MAX_LEN} tokens in the prompt" in err["message"]


def test_an_unknown_model_gets_404(post, server):
    body = httpx.Request("POST", "/", json={"model": "gpt-9", "prompt": "x"}).content
    err = error_of(httpx.post(server.url + "/v1/completions", content=body), 404)
    assert err["code"] == "model_not_found" and "gpt-9" in err["message"]


def test_unknown_paths_and_methods_get_json_errors(server):
    error_of(httpx.get(server.url + "/v2/nothing"), 404)
    error_of(httpx.get(server.url + "/v1/completions"), 405)


def test_the_client_sees_the_errors_as_its_exceptions(client):
    name = client.models.list().data[0].id
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=name, prompt=[1] * (MAX_LEN + 10), max_tokens=5)
    assert caught.value.code == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
