"""A thread-safe client for any OpenAI-compatible chat-completions endpoint (standard library).

`ChatClient.chat(messages, model)` sends one request and returns a `ChatReply`. It never raises
for what the endpoint does: an HTTP error, an HTML error page, malformed JSON, a missing
`choices`, empty content, a timeout or a refused connection all come back as
`ChatReply.error`, one line. It raises only `BudgetExceeded` (before anything is sent).

Retries: 429, 408, 5xx, timeouts and connection errors are retried up to `retries` more times,
waiting `min(backoff_max_s, backoff_base_s * 2**n * jitter)`, jitter drawn from [0.5, 1.5), or the
server's `Retry-After` (seconds or an HTTP date, capped at `backoff_max_s`) when it sends one.
Other 4xx answers are not retried. The jitter has its own generator: it never touches the
search's random state.

Concurrency: at most `max_concurrency` requests are in flight across threads; the rest wait.
`timeout_s` bounds one attempt from connect to last byte.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import random
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evokernel.evolve.llm.accounting import Accounting, estimate_tokens
from evokernel.evolve.llm.config import LLMConfig, ModelSpec
from evokernel.evolve.types import Usage, text_digest

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 521, 522, 524, 529}
_MAX_BODY = 16 << 20


@dataclass
class ChatReply:
    text: str  # the answer; "" when error is set
    model: str
    usage: Usage
    error: str = ""  # one line; empty on success
    finish_reason: str = ""
    attempts: int = 0
    wall_s: float = 0.0
    usage_estimated: bool = False
    prompt_digest: str = ""
    response_digest: str = ""
    history: list[str] = field(default_factory=list)  # one line per failed attempt

    @property
    def ok(self) -> bool:
        return not self.error


class _Failure(Exception):
    """One attempt failed; `retry` says whether another attempt may succeed."""

    def __init__(self, message: str, retry: bool, wait_s: float | None = None) -> None:
        super().__init__(message)
        self.retry = retry
        self.wait_s = wait_s


def prompt_text(messages: list[dict[str, str]]) -> str:
    """The canonical text of a conversation, the input of `prompt_digest`."""
    return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)


class ChatClient:
    def __init__(
        self,
        config: LLMConfig,
        accounting: Accounting | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        jitter_seed: int | None = None,
    ) -> None:
        self.config = config
        self.accounting = accounting or Accounting()
        self._sleep = sleep
        self._jitter = random.Random(jitter_seed)
        self._jitter_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(config.max_concurrency)

    def chat(self, messages: list[dict[str, str]], model: ModelSpec) -> ChatReply:
        cfg = self.config
        max_tokens = model.max_tokens or cfg.max_tokens
        prompt = prompt_text(messages)
        body: dict[str, Any] = {
            "model": model.name,
            "messages": messages,
            "temperature": cfg.temperature if model.temperature is None else model.temperature,
            "max_tokens": max_tokens,
        }
        if cfg.top_p is not None:
            body["top_p"] = cfg.top_p
        body.update(model.extra_body)
        payload = json.dumps(body).encode()
        reservation = self.accounting.reserve(model, len(prompt), max_tokens)
        reply = ChatReply("", model.name, Usage(model.name), prompt_digest=text_digest(prompt))
        t0 = time.monotonic()
        try:
            with self._slots:
                self._attempts(reply, payload, model, len(prompt))
        finally:
            reply.wall_s = time.monotonic() - t0
            self.accounting.settle(
                reservation,
                reply.usage,
                attempts=reply.attempts,
                wall_s=reply.wall_s,
                failed=bool(reply.error),
                estimated=reply.usage_estimated,
            )
        return reply

    def _attempts(self, reply: ChatReply, payload: bytes, model: ModelSpec, chars: int) -> None:
        for attempt in range(self.config.retries + 1):
            reply.attempts = attempt + 1
            try:
                raw = self._post(payload, model)
                self._parse(reply, raw, model, chars)
                reply.error = ""
                return
            except _Failure as fail:
                line = f"attempt {attempt + 1}: {fail}"
                reply.history.append(line)
                reply.error = str(fail)
                if not fail.retry or attempt == self.config.retries:
                    if attempt:
                        reply.error += f" (after {attempt + 1} attempts)"
                    return
                self._sleep(self._delay(attempt, fail.wait_s))

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        cap = self.config.backoff_max_s
        if retry_after is not None:
            return min(cap, max(0.0, retry_after))
        with self._jitter_lock:
            factor = 0.5 + self._jitter.random()
        return min(cap, self.config.backoff_base_s * 2**attempt * factor)

    def _post(self, payload: bytes, model: ModelSpec) -> bytes:
        cfg = self.config
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = cfg.api_key(model)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(cfg.endpoint(model), data=payload, headers=headers)
        deadline = time.monotonic() + cfg.timeout_s
        try:
            with urllib.request.urlopen(req, timeout=cfg.timeout_s) as resp:
                ctype = resp.headers.get("Content-Type", "")
                data = _read(resp, deadline)
                status = resp.status
        except urllib.error.HTTPError as err:
            detail = _error_detail(err)
            wait = _retry_after(err.headers.get("Retry-After")) if err.headers else None
            retry = err.code in _RETRY_STATUS or err.code >= 500
            raise _Failure(f"HTTP {err.code} from the endpoint: {detail}", retry, wait) from None
        except TimeoutError:
            raise _Failure(f"no complete answer within {cfg.timeout_s:g} s", True) from None
        except urllib.error.URLError as err:
            if isinstance(err.reason, TimeoutError):
                raise _Failure(f"no complete answer within {cfg.timeout_s:g} s", True) from None
            raise _Failure(f"cannot reach {cfg.endpoint(model)}: {err.reason}", True) from None
        except (ConnectionError, http.client.HTTPException, OSError) as err:
            raise _Failure(f"connection failed: {type(err).__name__}: {err}", True) from None
        if "json" not in ctype.lower() and not _looks_like_completion(data):
            snippet = _snippet(data)
            raise _Failure(f"HTTP {status} with content type {ctype or 'none'!r}: {snippet}", False)
        return data

    def _parse(self, reply: ChatReply, raw: bytes, model: ModelSpec, chars: int) -> None:
        try:
            doc = json.loads(raw.decode("utf-8", errors="replace"))
        except json.JSONDecodeError as err:
            detail = f"malformed JSON in the answer ({err.msg}): {_snippet(raw)}"
            raise _Failure(detail, True) from None
        if not isinstance(doc, dict):
            raise _Failure(f"the answer is JSON but not an object: {_snippet(raw)}", False)
        reply.response_digest = text_digest(raw.decode("utf-8", errors="replace"))
        if "error" in doc and not doc.get("choices"):
            detail = _snippet(json.dumps(doc["error"]))
            raise _Failure(f"the endpoint reported an error: {detail}", False)
        text, finish = _content(doc)
        usage, estimated = _usage(doc, model, chars, text)
        reply.usage = Usage(
            model.name,
            reply.usage.prompt_tokens + usage.prompt_tokens,
            reply.usage.completion_tokens + usage.completion_tokens,
            reply.usage.cost_usd + usage.cost_usd,
        )
        reply.usage_estimated = reply.usage_estimated or estimated
        if not text.strip():
            # an answer cut off at max_tokens (e.g. spent on reasoning) would be cut off again
            raise _Failure(f"empty answer (finish_reason={finish or 'none'})", finish != "length")
        reply.text, reply.finish_reason = text, finish
        reply.response_digest = text_digest(text)


def _content(doc: dict[str, Any]) -> tuple[str, str]:
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _Failure(f"the answer has no choices: {_snippet(json.dumps(doc))}", False)
    choice = choices[0]
    msg = choice.get("message")
    content = msg.get("content") if isinstance(msg, dict) else choice.get("text")
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        parts = (p.get("text") for p in content if isinstance(p, dict))
        content = "".join(t for t in parts if isinstance(t, str))
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise _Failure(f"message content is a {type(content).__name__}, not text", False)
    # JSON may escape lone surrogates ("\\ud800"), which no later stage can encode: "?" instead
    content = content.encode("utf-8", "replace").decode("utf-8")
    return content, str(choice.get("finish_reason") or "")


def _usage(doc: dict[str, Any], model: ModelSpec, chars: int, text: str) -> tuple[Usage, bool]:
    u = doc.get("usage")
    if isinstance(u, dict):
        p, c = u.get("prompt_tokens"), u.get("completion_tokens")
        if isinstance(p, int) and isinstance(c, int) and p >= 0 and c >= 0:
            return Usage(model.name, p, c, model.cost(p, c)), False
    p, c = estimate_tokens(chars), estimate_tokens(len(text))
    return Usage(model.name, p, c, model.cost(p, c)), True


def _looks_like_completion(data: bytes) -> bool:
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and "choices" in doc


def _read(resp: Any, deadline: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock = getattr(getattr(getattr(resp, "fp", None), "raw", None), "_sock", None)
        if sock is not None:
            sock.settimeout(left)
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > _MAX_BODY:
            raise _Failure(f"answer larger than {_MAX_BODY >> 20} MiB", False)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_detail(err: urllib.error.HTTPError) -> str:
    try:
        data = err.read(4096)
    except (OSError, http.client.HTTPException):
        data = b""
    try:
        doc = json.loads(data)
        if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
            return str(doc["error"].get("message", doc["error"]))[:200]
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    return _snippet(data) or str(err.reason)


def _snippet(data: bytes | str, limit: int = 160) -> str:
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    if "<" in text and ">" in text:
        title = re.search(r"<title>(.*?)</title>", text, re.I | re.S)
        text = title.group(1) if title else re.sub(r"<[^>]+>", " ", text)
    return " ".join(text.split())[:limit]
