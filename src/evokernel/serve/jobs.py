"""A validated request -> a `Job`: prompt ids, sampling, limits; every refusal a 400 by field.

`Served` is what the server knows about its model: the names it answers to, the tokenizer, the
chat template, the context (`--max-len`), the vocabulary, the EOS ids and the sampling
defaults (the checkpoint's generation_config.json where it sets them, else OpenAI's:
temperature 1, top_p 1). `Served.completion_job(req)` / `Served.chat_job(req)` check:

  * `model` is one of the served names (404 otherwise, as OpenAI answers);
  * the prompt is not empty, its ids lie in the vocabulary;
  * prompt + max_tokens fits the context: 400 `context_length_exceeded` with the numbers;
    without max_tokens, the rest of the context is the limit;
  * chat: there is a chat template, and it renders these messages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from evokernel.engine.batching import RowParams
from evokernel.serve.chat_template import RESERVED, ChatTemplate, TemplateFailure
from evokernel.serve.errors import APIError
from evokernel.serve.protocol import ChatRequest, CompletionRequest, _Sampling

if TYPE_CHECKING:
    from tokenizers import Tokenizer


@dataclass(frozen=True)
class Job:
    ids: list[int]
    params: RowParams
    max_tokens: int
    stop: list[str]
    stop_ids: frozenset[int]
    stream: bool
    include_usage: bool
    logprobs: int | None  # None: none; k: the token's and the top k
    think: bool  # split a leading think block into reasoning_content (chat)


@dataclass
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    @classmethod
    def from_checkpoint(cls, model_dir: Path) -> Sampling:
        """generation_config.json's temperature/top_p/top_k (do_sample false: greedy)."""
        path = model_dir / "generation_config.json"
        try:
            doc = json.loads(path.read_text()) if path.is_file() else {}
        except (OSError, ValueError):
            doc = {}
        out = cls()
        if doc.get("do_sample") is False:
            out.temperature = 0.0
        for key, kind in (("temperature", float), ("top_p", float), ("top_k", int)):
            value = doc.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                setattr(out, key, kind(value))
        return out


@dataclass
class Served:
    name: str
    aliases: frozenset[str]
    tokenizer: Tokenizer
    template: ChatTemplate | None
    max_len: int
    vocab_size: int
    eos_ids: frozenset[int]
    defaults: Sampling = field(default_factory=Sampling)

    def check_model(self, name: str) -> None:
        if name != self.name and name not in self.aliases:
            raise APIError(
                404,
                f"The model `{name}` does not exist; this server serves `{self.name}`",
                param="model",
                code="model_not_found",
            )

    def completion_job(self, req: CompletionRequest) -> Job:
        self.check_model(req.model)
        prompt = req.single_prompt
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt, add_special_tokens=False).ids
        else:
            ids = list(prompt)
        self._check_ids(ids, "prompt")
        return self._job(req, ids, req.max_tokens, "prompt", req.logprobs, think=False)

    def chat_job(self, req: ChatRequest) -> Job:
        self.check_model(req.model)
        if self.template is None:
            raise APIError(
                400,
                "this model has no chat template (none in its tokenizer_config.json or "
                "chat_template.jinja); start the server with --chat-template FILE, or use "
                "/v1/completions",
                param="messages",
            )
        kwargs = dict(req.chat_template_kwargs or {})
        clash = sorted(RESERVED & kwargs.keys())
        if clash:
            raise APIError(
                400,
                f"chat_template_kwargs: {clash[0]} is set by the server",
                param="chat_template_kwargs",
            )
        try:
            text = self.template.render([m.for_template() for m in req.messages], kwargs)
        except TemplateFailure as err:
            raise APIError(
                400, f"the chat template refused the messages: {err}", param="messages"
            ) from None
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        self._check_ids(ids, "messages")
        top = (req.top_logprobs or 0) if req.logprobs else None
        return self._job(req, ids, req.token_limit, "messages", top, think=self.template.thinks)

    def _check_ids(self, ids: list[int], param: str) -> None:
        if not ids:
            raise APIError(400, f"{param}: the prompt is empty", param=param)
        bad = next((i for i in ids if not 0 <= i < self.vocab_size), None)
        if bad is not None:
            raise APIError(
                400,
                f"{param}: token id {bad} is outside the vocabulary (0..{self.vocab_size - 1})",
                param=param,
            )

    def _job(
        self,
        req: _Sampling,
        ids: list[int],
        limit: int | None,
        param: str,
        logprobs: int | None,
        *,
        think: bool,
    ) -> Job:
        n = len(ids)
        room = self.max_len - n
        if limit is None and room >= 1:
            limit = room
        if limit is None or n + limit > self.max_len:
            asked = (
                f"{n + limit} tokens ({n} in the {param}, {limit} in the completion)"
                if limit
                else (f"{n} tokens in the {param} and at least 1 in the completion")
            )
            raise APIError(
                400,
                f"This model's maximum context length is {self.max_len} tokens (--max-len). "
                f"However, you requested {asked}. Please reduce the length of the {param} "
                "or the completion.",
                param=param,
                code="context_length_exceeded",
            )
        d = self.defaults
        top_k = d.top_k if req.top_k is None else max(req.top_k, 0)
        params = RowParams(
            temperature=d.temperature if req.temperature is None else req.temperature,
            top_k=top_k,
            top_p=d.top_p if req.top_p is None else req.top_p,
            seed=None if req.seed is None else req.seed % 2**63,
            logprobs=logprobs,
        )
        stop_ids = frozenset(req.stop_token_ids or ()) | (
            frozenset() if req.ignore_eos else self.eos_ids
        )
        return Job(
            ids=ids,
            params=params,
            max_tokens=limit,
            stop=req.stop_list,
            stop_ids=stop_ids,
            stream=req.stream,
            include_usage=req.include_usage,
            logprobs=logprobs,
            think=think,
        )
