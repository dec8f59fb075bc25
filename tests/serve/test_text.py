"""Tokens -> text (stop strings, split characters, think blocks), chat templates and request
validation, without a server."""

from __future__ import annotations

import json

import pytest

from evokernel.model.tokenizer import build_byte_tokenizer
from evokernel.serve.chat_template import BUILT_IN, TemplateFailure, load_chat_template
from evokernel.serve.errors import APIError
from evokernel.serve.protocol import ChatRequest, CompletionRequest, parse
from evokernel.serve.text import OutputText, ThinkSplitter

TOKENIZER = build_byte_tokenizer(512)  # one token per byte; 256.. are the special tokens


def ids(text: str) -> list[int]:
    return list(text.encode())


def stream(out: OutputText, tokens: list[int]) -> list[str]:
    return [out.push(t) for t in tokens]


def test_text_arrives_token_by_token_and_a_split_character_waits_for_its_bytes():
    out = OutputText(TOKENIZER, [])
    pieces = stream(out, ids("a€b"))  # € is three bytes
    assert pieces == ["a", "", "", "€", "b"]
    assert out.push(258) == ""  # a special token (EOS) adds no text


def test_a_stop_string_is_never_sent_in_part_and_cuts_the_text():
    out = OutputText(TOKENIZER, ["STOP", "xyz"])
    pieces = stream(out, ids("abST"))
    assert "".join(pieces) == "ab"  # "ST" may begin STOP: held back
    pieces += stream(out, ids("Ax"))  # not STOP after all; "x" may begin xyz
    assert "".join(pieces) == "abSTA"
    pieces += stream(out, ids("yzmore"))
    assert out.stopped and out.text == "abSTA" and "".join(pieces) == "abSTA"
    assert out.flush() == ""


def test_held_text_is_released_when_generation_ends():
    out = OutputText(TOKENIZER, ["STOP"])
    assert "".join(stream(out, ids("okS"))) == "ok"
    assert out.flush() == "S" and not out.stopped


def test_a_stop_string_spanning_tokens_after_sent_text():
    out = OutputText(TOKENIZER, ["\n\n"])
    pieces = stream(out, ids("line\n\nnext"))
    assert "".join(pieces) == "line" and out.stopped


def feed(splitter: ThinkSplitter, parts: list[str]) -> tuple[str, str]:
    reasoning = content = ""
    for part in parts:
        r, c = splitter.push(part)
        reasoning, content = reasoning + r, content + c
    r, c = splitter.flush()
    return reasoning + r, content + c


def test_a_think_block_becomes_reasoning_even_with_tags_split_across_pieces():
    parts = ["<th", "ink>", "let me ", "see</", "thi", "nk>", "\n\nAnswer"]
    assert feed(ThinkSplitter(), parts) == ("let me see", "\n\nAnswer")


def test_an_answer_without_a_think_block_is_all_content():
    assert feed(ThinkSplitter(), ["<t", "able>x"]) == ("", "<table>x")
    assert feed(ThinkSplitter(), ["Hello"]) == ("", "Hello")


def test_a_think_block_cut_by_the_length_limit_stays_reasoning():
    assert feed(ThinkSplitter(), ["<think>", "still thin", "king</th"]) == (
        "still thinking</th",
        "",
    )


def write_config(tmp_path, template) -> None:
    config = {"eos_token": {"content": "<|im_end|>"}, "chat_template": template}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))


def test_the_checkpoint_template_renders_with_kwargs_and_special_tokens(tmp_path):
    write_config(
        tmp_path,
        [{"name": "default", "template": "{{ messages[0].content }}|{{ eos_token }}|{{ flag }}"}],
    )
    template = load_chat_template(tmp_path)
    assert template is not None and not template.thinks
    assert template.render([{"role": "user", "content": "hi"}], {"flag": 1}) == "hi|<|im_end|>|1"


def test_a_template_that_raises_is_a_template_failure(tmp_path):
    write_config(tmp_path, "{{ raise_exception('only user messages') }}")
    template = load_chat_template(tmp_path)
    assert template is not None
    with pytest.raises(TemplateFailure, match="only user messages"):
        template.render([], {})


def test_the_built_in_chatml_template_closes_the_think_block_on_request(tmp_path):
    write_config(tmp_path, None)
    assert load_chat_template(tmp_path) is None
    template = load_chat_template(tmp_path, BUILT_IN["chatml"])
    assert template is not None and template.thinks
    messages = [{"role": "user", "content": "Hi"}]
    plain = template.render(messages, {})
    assert plain == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    closed = template.render(messages, {"enable_thinking": False})
    assert closed == plain + "<think>\n\n</think>\n\n"


@pytest.mark.parametrize(
    ("model", "body", "param"),
    [
        (CompletionRequest, {"model": "m", "prompt": [1, "x"]}, "prompt.1"),
        (CompletionRequest, {"model": "m", "prompt": "x", "seed": 2**64}, "seed"),
        (CompletionRequest, {"model": "m", "prompt": "x", "stream": "yes"}, "stream"),
        (
            ChatRequest,
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "image"}]}]},
            "messages.0.content.0.type",
        ),
        (ChatRequest, {"messages": [{"role": "user", "content": "x"}]}, "model"),
    ],
)
def test_validation_names_the_field(model, body, param):
    with pytest.raises(APIError) as caught:
        parse(model, json.dumps(body).encode())
    assert caught.value.status == 400 and caught.value.param == param, caught.value.message


def test_content_parts_join_into_the_message_text():
    body = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            }
        ],
    }
    request = parse(ChatRequest, json.dumps(body).encode())
    assert request.messages[0].for_template() == {"role": "user", "content": "ab"}


class _Engine:
    def __init__(self) -> None:
        self.cancelled: list[int] = []

    def cancel(self, rid: int) -> None:
        self.cancelled.append(rid)


def _generate_chat(text: str, stops: list[str]) -> tuple[dict, list[dict], _Engine]:
    """A chat answer of `text` (its bytes as tokens, then EOS) through Generation and Format,
    whole and streamed."""
    import asyncio
    import concurrent.futures

    from evokernel.engine.batching import RowParams
    from evokernel.serve.engine_client import TokenEvent, TokenStream
    from evokernel.serve.formats import Format
    from evokernel.serve.generation import Generation
    from evokernel.serve.jobs import Job
    from evokernel.serve.metrics import Metrics

    job = Job([1], RowParams(), 100, stops, frozenset({258}), True, False, None, think=True)
    engine = _Engine()

    async def run() -> tuple[dict, list[dict]]:
        stream = TokenStream(7)
        tokens = [*ids(text), 258]
        for k, t in enumerate(tokens):
            stream.queue.put_nowait(TokenEvent(t, finish="stop" if k == len(tokens) - 1 else None))
        gen = Generation(job, stream, engine, TOKENIZER, Metrics(4), 0.0)  # type: ignore[arg-type]
        fmt = Format(True, "m", TOKENIZER, None)
        pieces = []
        while not gen.finished:
            pieces.extend(await gen.next())
        chunks = fmt.chunk(pieces).decode().split("\n\n")
        deltas = [json.loads(c[6:])["choices"][0]["delta"] for c in chunks if c]
        return fmt.whole(pieces, gen.finish_reason or "", {}), deltas

    # In a thread of its own: another test of the session (a browser driven through Playwright's
    # sync API) may leave this thread inside a running event loop, where asyncio.run refuses.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        whole, deltas = pool.submit(asyncio.run, run()).result()
    return whole, deltas, engine


def test_a_think_block_comes_back_as_reasoning_content_whole_and_streamed():
    whole, deltas, _ = _generate_chat("<think>\nplan it\n</think>\n\nThe answer.", [])
    message = whole["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "\n\nThe answer.",
                       "reasoning_content": "\nplan it\n"}  # fmt: skip
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "\nplan it\n"
    assert "".join(d.get("content", "") for d in deltas) == "\n\nThe answer."
    assert whole["choices"][0]["finish_reason"] == "stop"


def test_a_stop_string_cancels_the_request_in_the_engine():
    whole, _, engine = _generate_chat("one. two. three.", [" two"])
    assert whole["choices"][0]["message"]["content"] == "one."
    assert whole["choices"][0]["finish_reason"] == "stop" and engine.cancelled == [7]
