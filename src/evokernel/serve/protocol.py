"""The request bodies of `/v1/completions` and `/v1/chat/completions` (pydantic, strict).

`parse(model_class, body)` validates raw JSON bytes with pydantic's JSON parser and turns the
first problem into a 400 `APIError` naming the field (`messages.0.role`, `temperature`).
Fields OpenAI defines that the server cannot honour (`n` > 1, penalties, `logit_bias`,
`tools`, `echo`, `suffix`, `best_of` > 1, a non-text `response_format`) are refused by name
rather than ignored; unknown fields are ignored, as most OpenAI-compatible servers do.
Extensions that vLLM also accepts: `top_k`, `ignore_eos`, `stop_token_ids`,
`chat_template_kwargs`.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evokernel.serve.errors import APIError

SEED_RANGE = 2**63


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class StreamOptions(_Strict):
    include_usage: bool = False


class _Sampling(_Strict):
    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1)
    n: int = Field(1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-SEED_RANGE, lt=SEED_RANGE)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    user: str | None = None

    @model_validator(mode="after")
    def _supported(self) -> _Sampling:
        if self.n != 1:
            raise APIError(400, "n: only one choice per request is supported (n = 1)", param="n")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name):
                raise APIError(400, f"{name}: not supported (only 0)", param=name)
        if self.logit_bias:
            raise APIError(400, "logit_bias: not supported", param="logit_bias")
        stops = self.stop_list
        if len(stops) > 16 or any(not s for s in stops):
            raise APIError(400, "stop: up to 16 non-empty strings", param="stop")
        if self.stream_options is not None and not self.stream:
            raise APIError(400, "stream_options: only with stream: true", param="stream_options")
        return self

    @property
    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_Sampling):
    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @model_validator(mode="after")
    def _single(self) -> CompletionRequest:
        if self.echo:
            raise APIError(400, "echo: not supported", param="echo")
        if self.suffix:
            raise APIError(400, "suffix: not supported", param="suffix")
        if self.best_of not in (None, 1):
            raise APIError(400, "best_of: only 1 is supported", param="best_of")
        p = self.prompt
        if isinstance(p, list) and p and isinstance(p[0], (str, list)) and len(p) != 1:
            raise APIError(400, "prompt: one prompt per request", param="prompt")
        return self

    @property
    def single_prompt(self) -> str | list[int]:
        p = self.prompt
        if isinstance(p, list) and p and isinstance(p[0], (str, list)):
            return p[0]  # type: ignore[return-value]
        return p  # type: ignore[return-value]


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class Message(BaseModel):
    # Extra keys (name, tool_call_id, ...) reach the template as they are.
    model_config = ConfigDict(strict=True, extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    reasoning_content: str | None = None

    def for_template(self) -> dict[str, Any]:
        doc = self.model_dump(exclude_none=True)
        if isinstance(self.content, list):
            doc["content"] = "".join(part.text for part in self.content)
        doc.setdefault("content", "")
        return doc


class ChatRequest(_Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[Any] | None = None
    response_format: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _chat(self) -> ChatRequest:
        if self.tools:
            raise APIError(400, "tools: tool calls are not supported", param="tools")
        kind = (self.response_format or {}).get("type", "text")
        if kind != "text":
            raise APIError(
                400, f"response_format: {kind!r} is not supported", param="response_format"
            )
        if self.top_logprobs is not None and not self.logprobs:
            raise APIError(400, "top_logprobs: needs logprobs: true", param="top_logprobs")
        return self

    @property
    def token_limit(self) -> int | None:
        return (
            self.max_completion_tokens
            if self.max_completion_tokens is not None
            else self.max_tokens
        )


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], body: bytes) -> M:
    try:
        return model.model_validate_json(body)
    except APIError:
        raise
    except ValidationError as err:
        # For a union (prompt: text, ids, ...) each member reports; the deepest location is
        # the member the value came closest to (`prompt.1`: an id that is not an integer).
        first = max(err.errors(include_url=False), key=lambda e: len(e["loc"]))
        if first["type"] == "json_invalid":
            raise APIError(400, f"the body is not valid JSON: {first['msg']}") from None
        if first["type"] == "model_type" and not first["loc"]:
            raise APIError(400, "the body must be a JSON object") from None
        param = _field(first["loc"])
        raise APIError(
            400, f"{param}: {first['msg']}" if param else first["msg"], param=param
        ) from None


def _field(loc: tuple[Any, ...]) -> str | None:
    """`messages.0.role` from a pydantic error location, without the union-member tags it
    adds (`prompt.list[int].0` -> `prompt.0`)."""
    parts = [str(p) for p in loc if isinstance(p, int) or ("[" not in p and p not in _TAGS)]
    return ".".join(parts) or None


_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "function-after"}
