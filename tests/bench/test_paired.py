"""bench/paired.py: two systems timed interleaved, ABBA, each round from the rewound position;
the speedup is b's over a with an interval. Recording systems stand in for models (the real
engine pair runs in tests/packs/test_pack_cli.py); their steps advance a fake host clock, so
the figures do not depend on how loaded the machine running the tests is."""

from __future__ import annotations

import contextlib
import types

import pytest

from evokernel.bench import stepping
from evokernel.bench.paired import measure_pair
from evokernel.bench.stepping import CellPlan


class _Clock:
    """The host clock the step timer reads; only the fake steps move it."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(stepping, "time", types.SimpleNamespace(perf_counter=fake.perf_counter))
    return fake


class _Session:
    def __init__(self, name: str, log: list[str], step_s: float, clock: _Clock | None) -> None:
        self.name, self.log, self.step_s, self.cache_len = name, log, step_s, None
        self.clock = clock

    def prefill(self) -> None:
        self.log.append(f"{self.name}.prefill")

    def rewind(self) -> None:
        self.log.append(f"{self.name}.rewind")

    def step(self) -> None:
        if self.clock is not None:
            self.clock.now += self.step_s
        self.log.append(f"{self.name}.step")

    def close(self) -> None:
        self.log.append(f"{self.name}.close")


class _System:
    host_timed = True

    def __init__(
        self, name: str, log: list[str], step_s: float, clock: _Clock | None = None
    ) -> None:
        self.name, self.log, self.step_s, self.clock = name, log, step_s, clock

    def open(self, prompt: list[int], need: int) -> _Session:
        assert need >= len(prompt)
        return _Session(self.name, self.log, self.step_s, self.clock)

    def context(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def setup(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        pass


def test_rounds_alternate_and_the_faster_b_shows_above_one(clock: _Clock) -> None:
    log: list[str] = []
    slow, fast = _System("a", log, 0.004, clock), _System("b", log, 0.002, clock)
    plan = CellPlan(position=3, steps=8, warmup=1, power_window_ms=0)
    entry = measure_pair(slow, fast, [1, 2, 3], plan, "cpu", rounds=4)
    assert entry["error"] is None and entry["block_steps"] == 2
    timed = [line for line in log if line.endswith(".rewind")][2:]  # after the warm-ups
    assert [line[0] for line in timed] == list("abbaabba")
    assert entry["ci"][0] <= entry["speedup"] <= entry["ci"][1]
    assert entry["speedup"] == pytest.approx(2.0) and entry["ci"][0] == pytest.approx(2.0)
    assert log[-2:] == ["a.close", "b.close"]


def test_a_failing_session_is_the_entrys_error() -> None:
    log: list[str] = []

    class Broken(_System):
        def open(self, prompt: list[int], need: int) -> _Session:
            raise RuntimeError("CUDA out of memory")

    plan = CellPlan(position=1, steps=4, warmup=0, power_window_ms=0)
    entry = measure_pair(_System("a", log, 0.0), Broken("b", log, 0.0), [1], plan, "cpu")
    assert entry["speedup"] is None and "CUDA out of memory" in entry["error"]
    assert "a.close" in log  # the session that did open is closed
