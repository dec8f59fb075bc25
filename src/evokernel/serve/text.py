"""Token ids -> the text a client sees: incremental detokenization, stop strings, think blocks.

`OutputText(tokenizer, stops)`: `push(token)` returns the text that may be sent now. Bytes of
a character split over several tokens wait for the rest (the tokenizer's DecodeStream), and so
does any tail of the text that could still grow into a stop string, so a stop string is never
sent in part. When a stop string appears, the text is cut before it, `stopped` turns true and
nothing more is sent; `flush()` returns what was held back when generation ends otherwise.
Special tokens (EOS) add no text.

`ThinkSplitter`: splits a chat answer that opens with `<think>` (Qwen3's reasoning block) into
`reasoning_content` (the block's text) and `content` (what follows `</think>`), incrementally,
holding back a partial tag. An answer that does not open with `<think>` is all content, as is
one whose prompt already closed the block (Qwen3 with `enable_thinking: false`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokenizers.decoders import DecodeStream

if TYPE_CHECKING:
    from tokenizers import Tokenizer

THINK_START, THINK_END = "<think>", "</think>"


def _held_tail(text: str, stops: list[str]) -> int:
    """Length of the longest tail of `text` that is a proper prefix of a stop string."""
    best = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:n]):
                best = n
                break
    return best


class OutputText:
    def __init__(self, tokenizer: Tokenizer, stops: list[str]) -> None:
        self._tokenizer = tokenizer
        self._decoder = DecodeStream(skip_special_tokens=True)
        self._stops = [s for s in stops if s]
        self._longest = max((len(s) for s in self._stops), default=0)
        self.text = ""  # everything decoded so far (cut at a stop string once one appears)
        self.sent = 0  # characters of `text` already returned
        self.stopped = False

    def push(self, token: int) -> str:
        if self.stopped:
            return ""
        piece = self._decoder.step(self._tokenizer, token)
        if not piece:
            return ""
        self.text += piece
        if not self._stops:
            return self._release(len(self.text))
        start = max(0, self.sent - self._longest)
        hits = [i for i in (self.text.find(s, start) for s in self._stops) if i >= 0]
        if hits:
            cut = min(hits)
            self.text = self.text[:cut]
            self.stopped = True
            return self._release(cut)
        return self._release(len(self.text) - _held_tail(self.text, self._stops))

    def flush(self) -> str:
        return "" if self.stopped else self._release(len(self.text))

    def _release(self, end: int) -> str:
        out = self.text[self.sent : end]
        self.sent = max(self.sent, end)
        return out


class ThinkSplitter:
    def __init__(self) -> None:
        self._state = "open"  # open (undecided) | thinking | answer
        self._buf = ""

    def push(self, text: str) -> tuple[str, str]:
        """(reasoning delta, content delta) for the next piece of the answer."""
        self._buf += text
        reasoning = ""
        if self._state == "open":
            head = self._buf.lstrip()
            if head.startswith(THINK_START):
                self._state, self._buf = "thinking", head[len(THINK_START) :]
            elif THINK_START.startswith(head):
                return "", ""  # could still become the tag
            else:
                self._state = "answer"
        if self._state == "thinking":
            end = self._buf.find(THINK_END)
            if end < 0:
                keep = _held_tail(self._buf, [THINK_END])
                reasoning, self._buf = (
                    self._buf[: len(self._buf) - keep],
                    self._buf[len(self._buf) - keep :],
                )
                return reasoning, ""
            reasoning, self._buf = self._buf[:end], self._buf[end + len(THINK_END) :]
            self._state = "answer"
        content, self._buf = self._buf, ""
        return reasoning, content

    def flush(self) -> tuple[str, str]:
        rest, self._buf = self._buf, ""
        return (rest, "") if self._state == "thinking" else ("", rest)
