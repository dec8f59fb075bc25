"""Accounting: per-model tallies, reservations against the budget, restore from a checkpoint."""

from __future__ import annotations

import threading

import pytest

from evokernel.evolve.llm.accounting import Accounting
from evokernel.evolve.llm.config import LLMBudget, ModelSpec
from evokernel.evolve.types import BudgetExceeded, Usage

M = ModelSpec("m", prompt_usd_per_mtok=2.0, completion_usd_per_mtok=8.0)


def test_tallies_per_model_and_total():
    acc = Accounting()
    for name, p, c in (("a", 10, 5), ("b", 20, 10), ("a", 1, 1)):
        res = acc.reserve(ModelSpec(name), 30, 100)
        acc.settle(res, Usage(name, p, c, 0.5), attempts=2, wall_s=1.0, failed=False)
    per = acc.per_model()
    assert (per["a"].requests, per["a"].prompt_tokens, per["a"].completion_tokens) == (2, 11, 6)
    total = acc.total()
    assert (total.requests, total.attempts, total.tokens, total.cost_usd) == (3, 6, 47, 1.5)


def test_requests_in_flight_make_the_next_one_wait_not_fail():
    acc = Accounting(LLMBudget(tokens=1000))
    first = acc.reserve(M, 300, 300)  # worst case 100 + 300
    second = acc.reserve(M, 300, 300)  # 800 reserved: a third does not fit yet
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(acc.reserve(M, 300, 300)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not got
    acc.settle(first, Usage("m", 100, 50), attempts=1, wall_s=0.1, failed=False)
    waiter.join(2.0)
    assert not waiter.is_alive() and len(got) == 1  # 150 spent + 400 + 400 reserved fits
    acc.settle(second, None, attempts=3, wall_s=0.1, failed=True)
    assert acc.total().failures == 1


def test_a_request_that_can_never_fit_fails_at_once():
    acc = Accounting(LLMBudget(tokens=1000))
    res = acc.reserve(M, 300, 300)
    acc.settle(res, Usage("m", 500, 200), attempts=1, wall_s=0.1, failed=False)
    with pytest.raises(
        BudgetExceeded, match="700 of 1000 tokens spent; the next request may need 400"
    ):
        acc.reserve(M, 300, 300)


def test_checkpoint_round_trip_keeps_spending():
    acc = Accounting(LLMBudget(cost_usd=1.0))
    res = acc.reserve(M, 30, 10)
    acc.settle(
        res,
        Usage("m", 100_000, 100_000, M.cost(100_000, 100_000)),
        attempts=1,
        wall_s=2.0,
        failed=False,
    )
    state = acc.to_dict()
    assert state["total"]["cost_usd"] == pytest.approx(1.0)
    back = Accounting.from_dict(state)
    assert back.total() == acc.total() and back.budget == acc.budget
    assert "money budget spent" in back.exhausted()
    looser = Accounting.from_dict(state, LLMBudget(cost_usd=5.0))
    assert looser.exhausted() == ""


def test_thread_safety():
    acc = Accounting()

    def work() -> None:
        for _ in range(500):
            res = acc.reserve(M, 3, 1)
            acc.settle(res, Usage("m", 1, 1, 0.001), attempts=1, wall_s=0.0, failed=False)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = acc.total()
    assert (total.requests, total.tokens) == (4000, 8000)
    assert total.cost_usd == pytest.approx(4.0)
