"""LLM mutators (diff, rewrite, crossover) against the scripted local endpoint."""

from __future__ import annotations

import random

import pytest
from chat_server import ChatServer, Reply, completion

from evokernel.errors import ConfigError
from evokernel.evolve.llm.accounting import Accounting
from evokernel.evolve.llm.client import ChatClient
from evokernel.evolve.llm.config import LLMBudget, LLMConfig, ModelSpec, pick_model
from evokernel.evolve.mutators.crossover import Crossover
from evokernel.evolve.mutators.llm import MAX_ANSWER_CHARS, LLMMutator
from evokernel.evolve.mutators.registry import build_mutators
from evokernel.evolve.types import BudgetExceeded, MutationContext, ProgramView, text_digest
from evokernel.tasks.blocks import check_edit, knob_values, set_knobs


def client_for(server: ChatServer, budget: LLMBudget | None = None, **kw) -> ChatClient:
    models = kw.pop("models", [ModelSpec("fast", weight=3.0), ModelSpec("strong", weight=1.0)])
    cfg = LLMConfig(api_base=server.api_base, models=models, retries=1, timeout_s=5.0, **kw)
    return ChatClient(cfg, Accounting(budget), sleep=lambda s: None)


def view(code: str, pid: str = "p1", fitness: float | None = 1.1) -> ProgramView:
    return ProgramView(pid, code, fitness, True, 0, 1, "seed")


def context(code: str, seed: int = 0, inspirations: list[ProgramView] | None = None):
    return MutationContext(
        task_name="toy",
        task_interface="def attend(q, k, v, scale): ...",
        task_description="Softmax attention of one query per head.",
        device="cpu",
        hardware={"gpu": "NVIDIA H100", "copy_gbps": 3000.0},
        parent=view(code),
        inspirations=inspirations or [],
        insights=["p0 offline:knob (BLOCK_N 16 -> 32) vs p1: fitness 1.000 -> 1.050"],
        rng=random.Random(seed),
        iteration=3,
    )


GOOD_DIFF = """Change: exponentials in base 2.
Some prose first.
```
<<<<<<< SEARCH
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
=======
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new)
>>>>>>> REPLACE
```
and a second edit
<<<<<<< SEARCH
BLOCK_N = 16  # tune: 8, 16, 32, 64
=======
BLOCK_N = 32  # tune: 8, 16, 32, 64
>>>>>>> REPLACE
"""


def test_good_diff(server, toy_source):
    server.add(completion(GOOD_DIFF, 900, 80))
    mut = LLMMutator("diff", client_for(server))
    p = mut.propose(context(toy_source))
    assert p.error == "" and p.code is not None and p.kind == "llm:diff"
    assert "tl.exp2(s - m_new)" in p.code and knob_values(p.code)["BLOCK_N"] == 32
    assert check_edit(toy_source, p.code) is None
    assert p.description == "exponentials in base 2."
    assert p.parent_ids == ("p1",)
    assert p.response == GOOD_DIFF and p.response_digest == text_digest(GOOD_DIFF)
    assert p.prompt_digest == text_digest(p.prompt) and "EVOLVE-BLOCK-START" in p.prompt
    assert p.usage[0].prompt_tokens == 900 and p.usage[0].completion_tokens == 80
    sent = server.requests[0]["body"]["messages"]
    assert sent[0]["role"] == "system" and "SEARCH" in sent[1]["content"]


@pytest.mark.parametrize(
    ("answer", "needle"),
    [
        ("Change: x\n<<<<<<< SEARCH\nBLOCK_N = 16\n>>>>>>> REPLACE\n", "divider"),
        (
            "Change: x\n<<<<<<< SEARCH\nBLOCK_N = 16  # tune: 8, 16, 32, 64\n=======\nBLOCK",
            "cut off",
        ),
        ("Change: nothing\nI would make it faster.", "no SEARCH/REPLACE edit"),
        (
            "<<<<<<< SEARCH\n    h = tl.program_id(1)\n=======\n    h = 0\n>>>>>>> REPLACE",
            "not found in the EVOLVE-BLOCK: 'h = tl.program_id(1)'; closest block line",
        ),
        (
            "<<<<<<< SEARCH\nimport torch\n=======\nimport numpy\n>>>>>>> REPLACE",
            "fixed code outside the EVOLVE-BLOCK",
        ),
        (
            "<<<<<<< SEARCH\n# EVOLVE-BLOCK-END\n=======\n\n>>>>>>> REPLACE",
            "remove the '# EVOLVE-BLOCK-END' marker",
        ),
    ],
)
def test_bad_diffs_give_readable_reasons(server, toy_source, answer, needle):
    server.add(completion(answer))
    p = LLMMutator("diff", client_for(server)).propose(context(toy_source))
    assert p.code is None and needle in p.error, p.error
    assert p.error.startswith(("fast: ", "strong: ")) and "\n" not in p.error
    assert p.response == answer and p.usage


def test_answer_cut_at_max_tokens_is_said(server, toy_source):
    server.add(completion("<<<<<<< SEARCH\nBLOCK_N = 16", finish_reason="length"))
    p = LLMMutator("diff", client_for(server)).propose(context(toy_source))
    assert p.code is None and "hit max_tokens" in p.error


def test_invalid_code_is_returned_for_the_evaluator_to_reject(server, toy_source):
    answer = (
        '<<<<<<< SEARCH\n    m_i = -float("inf")\n=======\n    m_i = -float("inf"\n>>>>>>> REPLACE'
    )
    server.add(completion(answer))
    p = LLMMutator("diff", client_for(server)).propose(context(toy_source))
    assert p.code is not None and p.error == ""
    with pytest.raises(SyntaxError):
        compile(p.code, "child.py", "exec")


def test_diff_mode_answer_with_a_whole_block_is_a_rewrite(server, toy_source):
    new = toy_source.replace("BLOCK_N = 16  #", "BLOCK_N = 64  #")
    server.add(completion(f"Change: bigger tiles\n```python\n{new}\n```"))
    p = LLMMutator("diff", client_for(server)).propose(context(toy_source))
    assert p.kind == "llm:rewrite" and p.code is not None
    assert knob_values(p.code)["BLOCK_N"] == 64 and p.description == "bigger tiles"


def test_rewrite_keeps_the_fixed_code(server, toy_source):
    tampered = toy_source.replace("import torch", "import torch, os").replace(
        "NUM_WARPS = 4  #", "NUM_WARPS = 8  #"
    )
    server.add(completion(f"**Change:** more warps\n```python\n{tampered}```\n"))
    p = LLMMutator("rewrite", client_for(server)).propose(context(toy_source))
    assert p.code is not None and p.kind == "llm:rewrite"
    assert "import torch, os" not in p.code and knob_values(p.code)["NUM_WARPS"] == 8
    assert check_edit(toy_source, p.code) is None
    assert "complete new EVOLVE-BLOCK" in server.requests[0]["body"]["messages"][1]["content"]


def test_rewrite_without_code_or_cut_off(server, toy_source):
    server.add(completion("Change: x\nno code here"), completion("```python\nBLOCK_N = 8\n"))
    mut = LLMMutator("rewrite", client_for(server))
    assert "no code block" in mut.propose(context(toy_source)).error
    assert "never closes" in mut.propose(context(toy_source)).error


def test_an_oversized_answer_is_refused_unread(server, toy_source):
    new = toy_source.replace("BLOCK_N = 16  #", "BLOCK_N = 64  #")
    padding = "```py\n" * (MAX_ANSWER_CHARS // 6)  # unclosed fences: work for a parser
    server.add(completion(f"{padding}\n```python\n{new}\n```"))
    p = LLMMutator("rewrite", client_for(server)).propose(context(toy_source))
    assert p.code is None and f"the limit is {MAX_ANSWER_CHARS}" in p.error
    assert p.response.startswith(padding) and p.response.endswith("more characters not kept]")
    assert len(p.response) < MAX_ANSWER_CHARS + 100  # what the run directory keeps


def test_endpoint_failure_becomes_the_proposal_error(server, toy_source):
    server.add(*[Reply("<html><title>Bad Gateway</title></html>", 502, "text/html")] * 2)
    p = LLMMutator("diff", client_for(server)).propose(context(toy_source))
    assert p.code is None and "HTTP 502" in p.error and "Bad Gateway" in p.error


def test_budget_exceeded_propagates(server, toy_source):
    mut = LLMMutator("diff", client_for(server, budget=LLMBudget(tokens=100)))
    with pytest.raises(BudgetExceeded):
        mut.propose(context(toy_source))
    assert server.requests == []


def test_model_choice_is_weighted_and_deterministic(server, toy_source):
    models = [ModelSpec("fast", weight=3.0), ModelSpec("strong", weight=1.0)]
    picks = [pick_model(models, random.Random(s)).name for s in range(2000)]
    assert picks == [pick_model(models, random.Random(s)).name for s in range(2000)]
    assert 0.7 < picks.count("fast") / len(picks) < 0.8
    server.responder = lambda body: completion("no edits")
    mut = LLMMutator("diff", client_for(server))
    for seed in (1, 2, 3, 1, 2, 3):
        mut.propose(context(toy_source, seed=seed))
    sent = [r["body"]["model"] for r in server.requests]
    assert sent[:3] == sent[3:]
    zero = [ModelSpec("off", weight=0.0), ModelSpec("on")]
    assert {pick_model(zero, random.Random(s)).name for s in range(50)} == {"on"}


def test_llm_crossover_shows_both_parents(server, toy_source):
    other_code = toy_source.replace(
        's = tl.where(mask_n, s, float("-inf"))', "s = tl.where(mask_n, s, -1e30)"
    )
    other = view(other_code, "p9", 1.3)
    new_block = other_code.replace("NUM_WARPS = 4  #", "NUM_WARPS = 2  #")
    server.add(completion(f"Change: take p9's mask\n```python\n{new_block}\n```"))
    xo = Crossover(LLMMutator("crossover", client_for(server)))
    p = xo.propose(context(toy_source, inspirations=[other]))
    assert p.kind == "llm:crossover" and p.parent_ids == ("p1", "p9") and p.code is not None
    assert "-1e30" in p.code and knob_values(p.code)["NUM_WARPS"] == 2
    user = server.requests[0]["body"]["messages"][1]["content"]
    assert "A second correct program (id p9" in user and "-1e30" in user


def test_crossover_of_knob_only_variants_needs_no_endpoint(server, toy_source):
    other = view(set_knobs(toy_source, {"BLOCK_N": 64, "BLOCK": 128}), "p5")
    xo = Crossover(LLMMutator("crossover", client_for(server)))
    p = xo.propose(context(toy_source, inspirations=[other]))
    assert p.kind == "offline:crossover" and p.code is not None and server.requests == []


def test_registry_builds_and_chooses(server):
    cfg = LLMConfig(api_base=server.api_base, models=[ModelSpec("m")])
    weights = {"offline": 1.0, "llm_diff": 2.0, "llm_rewrite": 0.0, "crossover": 1.0}
    mset = build_mutators(weights, cfg)
    assert mset.client is not None and mset.accounting is mset.client.accounting
    rng = random.Random(0)
    names = [mset.choose(rng).name for _ in range(4000)]
    assert names.count("llm_rewrite") == 0
    assert 0.45 < names.count("llm_diff") / 4000 < 0.55
    assert 0.2 < names.count("offline") / 4000 < 0.3
    with pytest.raises(ConfigError, match="llm_diff"):
        build_mutators({"llm_diff": 1.0}, LLMConfig())
    with pytest.raises(ConfigError, match="unknown mutator"):
        build_mutators({"magic": 1.0})
    offline_only = build_mutators({"offline": 1.0, "crossover": 1.0})
    assert offline_only.client is None and set(offline_only.mutators) == {"offline", "crossover"}
