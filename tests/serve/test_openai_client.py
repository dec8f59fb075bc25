"""The official `openai` client against a real server on the tiny checkpoint: models, chat,
completions, streaming with usage, concurrent greedy requests equal to the same requests run
alone, stop strings, logprobs, seeds, and the metrics they leave."""

from __future__ import annotations

import re
import threading

import httpx
import pytest
from server_proc import MAX_LEN

GREEDY = {"temperature": 0, "extra_body": {"ignore_eos": True}}


def model_name(client) -> str:
    return client.models.list().data[0].id


def test_models_lists_the_served_model(client, server):
    models = client.models.list().data
    assert len(models) == 1 and models[0].object == "model"
    raw = httpx.get(server.url + "/v1/models").json()
    assert raw["data"][0]["max_model_len"] == MAX_LEN


def test_chat_answer_equals_the_completion_of_its_rendered_prompt(client):
    name = model_name(client)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"}]
    chat = client.chat.completions.create(model=name, messages=messages, max_tokens=12, **GREEDY)
    choice = chat.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason == "length"
    assert chat.usage.completion_tokens == 12
    rendered = (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    plain = client.completions.create(model=name, prompt=rendered, max_tokens=12, **GREEDY)
    assert chat.usage.prompt_tokens == plain.usage.prompt_tokens
    assert choice.message.content == plain.choices[0].text


def test_enable_thinking_false_closes_the_think_block_in_the_prompt(client):
    name = model_name(client)
    messages = [{"role": "user", "content": "Hi"}]

    def prompt_tokens(**kwargs) -> int:
        r = client.chat.completions.create(model=name, messages=messages, max_tokens=1, **kwargs)
        return r.usage.prompt_tokens

    closed = prompt_tokens(extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert closed - prompt_tokens() == len("<think>\n\n</think>\n\n")  # one byte, one token


def test_completions_take_text_or_token_ids(client):
    name = model_name(client)
    by_ids = client.completions.create(model=name, prompt=[72, 105], max_tokens=6, **GREEDY)
    by_text = client.completions.create(model=name, prompt="Hi", max_tokens=6, **GREEDY)
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert by_ids.usage.prompt_tokens == 2 and by_ids.usage.total_tokens == 8


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_streaming_sends_one_chunk_per_token_and_usage_last(client, endpoint):
    name = model_name(client)
    n = 20
    if endpoint == "chat":
        kwargs = {"messages": [{"role": "user", "content": "Stream"}]}
        create = client.chat.completions.create
    else:
        kwargs = {"prompt": "Stream"}
        create = client.completions.create
    whole = create(model=name, max_tokens=n, **kwargs, **GREEDY)
    chunks = list(
        create(
            model=name,
            max_tokens=n,
            stream=True,
            stream_options={"include_usage": True},
            **kwargs,
            **GREEDY,
        )
    )
    *tokens, last = chunks
    assert last.choices == [] and last.usage.completion_tokens == n
    if endpoint == "chat":
        assert tokens[0].choices[0].delta.role == "assistant"
        tokens = tokens[1:]
        text = "".join(c.choices[0].delta.content or "" for c in tokens)
        assert text == whole.choices[0].message.content
    else:
        text = "".join(c.choices[0].text for c in tokens)
        assert text == whole.choices[0].text
    assert len(tokens) == n
    assert [c.choices[0].finish_reason for c in tokens] == [None] * (n - 1) + ["length"]


def test_streaming_without_include_usage_sends_no_usage(client):
    chunks = list(
        client.completions.create(
            model=model_name(client), prompt="x", max_tokens=3, stream=True, **GREEDY
        )
    )
    assert len(chunks) == 3 and all(c.usage is None for c in chunks)


PROMPTS = [[(7 * i + 3 * k) % 250 + 1 for k in range(1 + 9 * i)] for i in range(8)]


def test_eight_concurrent_greedy_requests_equal_the_same_requests_alone(client, server):
    name = model_name(client)
    n = 40

    def run(prompt: list[int]) -> list[str]:
        r = client.completions.create(model=name, prompt=prompt, max_tokens=n, logprobs=0, **GREEDY)
        return r.choices[0].logprobs.tokens  # one entry per token: the ids' own text

    alone = [run(p) for p in PROMPTS]
    before = _occupancy(server)
    together: list[list[str] | None] = [None] * len(PROMPTS)
    barrier = threading.Barrier(len(PROMPTS))

    def worker(i: int) -> None:
        barrier.wait()
        together[i] = run(PROMPTS[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert together == alone
    after = _occupancy(server)
    batched_steps = after["steps"] - after["le1"] - (before["steps"] - before["le1"])
    assert batched_steps > 0, "no decode step ran more than one request"


def _occupancy(server) -> dict[str, float]:
    text = httpx.get(server.url + "/metrics").text
    le1 = re.search(r'evokernel_batch_occupancy_rows_bucket\{le="1.0"\} (\S+)', text)
    steps = re.search(r"evokernel_batch_occupancy_rows_count (\S+)", text)
    assert le1 and steps
    return {"le1": float(le1[1]), "steps": float(steps[1])}


def test_stop_string_ends_the_text_before_it(client):
    name = model_name(client)
    prompt = "The stop test"
    full = client.completions.create(model=name, prompt=prompt, max_tokens=60, **GREEDY)
    text = full.choices[0].text
    cut = next(i for i in range(8, len(text) - 3) if text.find(text[i : i + 3]) == i)
    stop = text[cut : cut + 3]
    stopped = client.completions.create(
        model=name, prompt=prompt, max_tokens=60, stop=[stop], **GREEDY
    )
    assert stopped.choices[0].text == text[:cut]
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.usage.completion_tokens < 60
    streamed = client.completions.create(
        model=name, prompt=prompt, max_tokens=60, stop=stop, stream=True, **GREEDY
    )
    pieces = list(streamed)
    assert "".join(c.choices[0].text for c in pieces) == text[:cut]
    assert pieces[-1].choices[0].finish_reason == "stop"


def test_logprobs_of_completions_and_chat(client):
    name = model_name(client)
    r = client.completions.create(model=name, prompt="log", max_tokens=5, logprobs=3, **GREEDY)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    assert all(v <= 0 for v in lp.token_logprobs)
    # greedy: the chosen token is the most likely one (ids with the same text share a key)
    assert all(v >= max(top.values()) - 1e-6 for v, top in zip(lp.token_logprobs, lp.top_logprobs))
    chat = client.chat.completions.create(
        model=name,
        messages=[{"role": "user", "content": "log"}],
        max_tokens=4,
        logprobs=True,
        top_logprobs=2,
        **GREEDY,
    )
    content = chat.choices[0].logprobs.content
    assert len(content) == 4 and all(len(c.top_logprobs) == 2 for c in content)


def test_a_seed_reproduces_sampling_alone_or_batched(client):
    name = model_name(client)
    kwargs = {
        "model": name,
        "prompt": "seeded",
        "max_tokens": 24,
        "temperature": 1.0,
        "top_p": 0.9,
        "extra_body": {"ignore_eos": True, "top_k": 50},
    }
    first = client.completions.create(seed=7, logprobs=0, **kwargs).choices[0].logprobs.tokens
    out: dict[int, list[str]] = {}

    def worker(seed: int) -> None:
        out[seed] = (
            client.completions.create(seed=seed, logprobs=0, **kwargs).choices[0].logprobs.tokens
        )

    threads = [threading.Thread(target=worker, args=(s,)) for s in (7, 8, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert out[7] == first
    assert out[8] != first or out[9] != first


def test_metrics_count_requests_and_tokens(server, client):
    client.completions.create(model=model_name(client), prompt="m", max_tokens=2, **GREEDY)
    text = httpx.get(server.url + "/metrics").text
    assert 'evokernel_requests_total{endpoint="completions",status="200"}' in text
    for series in (
        "evokernel_generation_tokens_total",
        "evokernel_prompt_tokens_total",
        "evokernel_time_to_first_token_seconds_count",
        "evokernel_inter_token_latency_seconds_count",
        'evokernel_engine_launches_total{work="decode"}',
        'evokernel_engine_launches_total{work="prefill"}',
        'evokernel_engine_units_total{kind="used",work="prefill"}',
        'evokernel_engine_device_seconds_total{work="decode"}',
        "evokernel_engine_busy_seconds_total",
        "evokernel_engine_cpu_seconds_total",
        "process_cpu_seconds_total",
    ):
        value = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
        assert value and float(value[1]) > 0, series
    assert re.search(r"^evokernel_queue_depth 0\.0$", text, re.M)
    assert re.search(r"^evokernel_batch_capacity 8\.0$", text, re.M)
