"""OpenAI's response shapes for completions and chat completions, whole and as SSE chunks.

`Format` writes one request's responses: `chunk(pieces)` the server-sent events for a batch of
pieces (one event per token), `opening()` the chat's first event (the assistant role),
`closing(usage)` the usage event (when `stream_options.include_usage`) and `[DONE]`,
`whole(pieces, usage)` the non-streaming body. Logprobs follow each endpoint's layout:
completions `{tokens, token_logprobs, top_logprobs, text_offset}`, chat
`{content: [{token, logprob, bytes, top_logprobs}]}`; a token's text is its own decoding.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from evokernel.serve.generation import Piece

DONE = b"data: [DONE]\n\n"


def sse(doc: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class Format:
    def __init__(self, chat: bool, model: str, tokenizer: Tokenizer, logprobs: int | None) -> None:
        self.chat = chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.model = model
        self.tokenizer = tokenizer
        self.logprobs = logprobs
        self._offset = 0  # text offset, completions logprobs
        self._first = True

    def _doc(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    # -- streaming ----------------------------------------------------------------------------

    def opening(self) -> bytes:
        if not self.chat:
            return b""
        delta = {"role": "assistant", "content": ""}
        return sse(self._doc("chat.completion.chunk", [self._choice(delta, None, None)]))

    def chunk(self, pieces: list[Piece]) -> bytes:
        out = []
        for p in pieces:
            lp = self._logprobs([p]) if self.logprobs is not None else None
            if self.chat:
                delta: dict[str, Any] = {"content": p.text}
                if p.reasoning:
                    delta = {"reasoning_content": p.reasoning} | (
                        {"content": p.text} if p.text else {}
                    )
                doc = self._doc("chat.completion.chunk", [self._choice(delta, lp, p.finish)])
            else:
                choice = {"index": 0, "text": p.text, "logprobs": lp, "finish_reason": p.finish}
                doc = self._doc("text_completion", [choice])
            out.append(sse(doc))
        return b"".join(out)

    def closing(self, counts: dict[str, int] | None) -> bytes:
        if counts is None:
            return DONE
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return sse(self._doc(obj, []) | {"usage": counts}) + DONE

    def _choice(self, delta: dict[str, Any], lp: Any, finish: str | None) -> dict[str, Any]:
        return {"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}

    # -- whole --------------------------------------------------------------------------------

    def whole(self, pieces: list[Piece], finish: str, counts: dict[str, int]) -> dict[str, Any]:
        text = "".join(p.text for p in pieces)
        lp = self._logprobs(pieces) if self.logprobs is not None else None
        if self.chat:
            reasoning = "".join(p.reasoning for p in pieces)
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if reasoning:
                message["reasoning_content"] = reasoning
            choice = {"index": 0, "message": message, "logprobs": lp, "finish_reason": finish}
            return self._doc("chat.completion", [choice]) | {"usage": counts}
        choice = {"index": 0, "text": text, "logprobs": lp, "finish_reason": finish}
        return self._doc("text_completion", [choice]) | {"usage": counts}

    # -- logprobs -----------------------------------------------------------------------------

    def _token(self, token: int) -> str:
        return self.tokenizer.decode([token], skip_special_tokens=False)

    def _logprobs(self, pieces: list[Piece]) -> dict[str, Any] | None:
        rows = [p for p in pieces if p.logprob is not None]
        if self.chat:
            content = []
            for p in rows:
                token = self._token(p.token)
                tops = [
                    {"token": (t := self._token(i)), "logprob": v, "bytes": list(t.encode())}
                    for i, v in p.top or []
                ]
                content.append(
                    {
                        "token": token,
                        "logprob": p.logprob,
                        "bytes": list(token.encode()),
                        "top_logprobs": tops,
                    }
                )
            return {"content": content}
        tokens, offsets = [], []
        for p in rows:
            tokens.append(self._token(p.token))
            offsets.append(self._offset)
            self._offset += len(p.text)
        return {
            "tokens": tokens,
            "token_logprobs": [p.logprob for p in rows],
            "top_logprobs": [{self._token(i): v for i, v in p.top or []} for p in rows],
            "text_offset": offsets,
        }
