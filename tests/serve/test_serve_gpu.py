"""On CUDA (the GPU check): the server on Qwen3-0.6B's layer shapes (2 layers, bf16, Triton
kernels, CUDA graphs) answers 12 concurrent streaming clients, each getting exactly its tokens,
with decode steps of more rows than one fused launch takes (row groups)."""

from __future__ import annotations

import json
import re
import threading

import httpx
import pytest
from server_proc import ServerProcess

from evokernel.model.random import write_random_checkpoint

pytestmark = pytest.mark.gpu


def test_concurrent_streams_on_cuda(tmp_path):
    ckpt = write_random_checkpoint(
        tmp_path / "small", "qwen3-0.6b", seed=5, dtype="bfloat16", layers=2
    )
    args = [
        "--model",
        str(ckpt),
        "--chat-template",
        "chatml",
        "--max-batch",
        "16",
        "--max-len",
        "1024",
    ]
    with ServerProcess(args, device="cuda") as server:
        assert "CUDA graphs" in server.stdout[0] and " 0 CUDA graphs" not in server.stdout[0]
        name = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
        url = server.url + "/v1/completions"
        counts: dict[int, int] = {}
        start = threading.Barrier(12)  # all at once, so that the batch grows past 8 rows

        def worker(i: int) -> None:
            start.wait(60)
            body = {"model": name, "prompt": list(range(100, 110 + 7 * i)), "max_tokens": 256,
                    "temperature": 0, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True}}  # fmt: skip
            with httpx.stream("POST", url, json=body, timeout=120) as response:
                for line in response.iter_lines():
                    if line.startswith("data: {") and '"usage"' in line:
                        counts[i] = json.loads(line[6:])["usage"]["completion_tokens"]

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert counts == {i: 256 for i in range(12)}
        chat = httpx.post(
            server.url + "/v1/chat/completions",
            json={"model": name, "messages": [{"role": "user", "content": "hi"}],
                  "max_tokens": 8, "temperature": 0.7, "seed": 3},
            timeout=60,
        ).json()  # fmt: skip
        assert chat["usage"]["completion_tokens"] <= 8
        text = httpx.get(server.url + "/metrics").text
        le8 = float(re.search(r'evokernel_batch_occupancy_rows_bucket\{le="8.0"\} (\S+)', text)[1])
        steps = float(re.search(r"evokernel_batch_occupancy_rows_count (\S+)", text)[1])
        assert steps > le8, "no step ran more than 8 rows"
