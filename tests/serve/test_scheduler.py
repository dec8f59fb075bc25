"""The engine loop's scheduling (serve/scheduler.py) in this process, on the CPU: exact
max_tokens, stop ids, cancellation mid-run, a full batch queueing in arrival order, and the
prefill budget spreading admissions over turns."""

from __future__ import annotations

import pytest
import torch

from evokernel.engine.batching import BatchRunner, RowParams
from evokernel.engine.loading import load_engine
from evokernel.serve.scheduler import Scheduler

GREEDY = RowParams()


@pytest.fixture(scope="module")
def model(tiny_chat):
    return load_engine(tiny_chat, "cpu", None, "torch", max_seq_len=256)


def run(scheduler: Scheduler, turns: int = 500) -> dict[int, list[tuple]]:
    """Events per request id until the scheduler is idle."""
    out: dict[int, list[tuple]] = {}
    with torch.inference_mode():
        for _ in range(turns):
            if not scheduler.busy:
                break
            events, _ = scheduler.turn()
            for rid, token, _lp, _top, finish in events:
                out.setdefault(rid, []).append((token, finish))
    return out


def test_each_request_gets_exactly_its_max_tokens_and_ends_with_length(model):
    s = Scheduler(BatchRunner(model, 4, 256), prefill_budget=2048)
    for rid, n in ((1, 1), (2, 2), (3, 9), (4, 30)):
        s.add(rid, [rid, 7, 9], GREEDY, n, ())
    out = run(s)
    for rid, n in ((1, 1), (2, 2), (3, 9), (4, 30)):
        assert len(out[rid]) == n and out[rid][-1][1] == "length"
        assert all(f is None for _, f in out[rid][:-1])
    assert not s.running and not s.by_rid


def test_a_stop_id_ends_a_request_on_that_token(model):
    s = Scheduler(BatchRunner(model, 2, 256), prefill_budget=2048)
    s.add(1, [3, 4, 5], GREEDY, 20, ())
    free = [t for t, _ in run(s)[1]]
    stop = free[5]
    s.add(2, [3, 4, 5], GREEDY, 20, (stop,))
    cut = run(s)[2]
    first = free.index(stop)
    assert [t for t, _ in cut] == free[: first + 1] and cut[-1][1] == "stop"


def test_a_cancelled_request_stops_and_frees_its_slot_for_the_queue(model):
    s = Scheduler(BatchRunner(model, 1, 256), prefill_budget=2048)
    s.add(1, [1, 2], GREEDY, 200, ())
    s.add(2, [1, 2], GREEDY, 5, ())  # waits: one slot
    with torch.inference_mode():
        seen = 0
        while seen < 4:
            events, stats = s.turn()
            seen += len(events)
            assert stats[1:] == (1, 1)  # one running, one waiting
        s.cancel(1)
    out = run(s)
    assert 1 not in out  # nothing more for the cancelled one
    assert len(out[2]) == 5 and out[2][-1][1] == "length"


def test_the_prefill_budget_spreads_admissions_over_turns(model):
    s = Scheduler(BatchRunner(model, 8, 256), prefill_budget=100)
    for rid in range(4):
        s.add(rid, list(range(1, 61)), GREEDY, 3, ())  # 60 tokens each: one per turn
    with torch.inference_mode():
        admitted = []
        for _ in range(4):
            s.turn()
            admitted.append(4 - len(s.waiting))
    assert admitted == [1, 2, 3, 4]


def test_requests_admitted_in_one_turn_are_prefilled_together_and_match_alone(model):
    """A burst of waiting requests is admitted in one turn, those of a length bucket in one
    staged prefill; every request's tokens equal the same request run alone."""
    prompts = [[3] * 5, [4] * 12, [5] * 7, [6] * 20, [7] * 2]

    def scheduler(staged: bool) -> Scheduler:
        runner = BatchRunner(model, 8, 256, staged_prefill=staged)
        return Scheduler(runner, prefill_budget=4096)

    alone = []
    for p in prompts:
        s = scheduler(False)
        s.add(1, p, GREEDY, 6, ())
        alone.append([t for t, _ in run(s)[1]])
    s = scheduler(True)
    for rid, p in enumerate(prompts):
        s.add(rid, p, GREEDY, 6, ())
    with torch.inference_mode():
        first, _ = s.turn()
    assert not s.waiting and len(s.running) == len(prompts)
    s.runner.clock.collect()
    launches = s.runner.clock.snapshot()["prefill"]["launches"]
    assert launches == 2  # bucket 16: four prompts together; bucket 32: one
    got: dict[int, list[int]] = {}
    for rid, token, *_ in first:
        got.setdefault(rid, []).append(token)
    for rid, events in run(s).items():
        got.setdefault(rid, []).extend(t for t, _ in events)
    assert [got[rid] for rid in range(len(prompts))] == alone
