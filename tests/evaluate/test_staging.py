"""Inputs are drawn on the host before the device lock is taken: every Check, Prepare and
Profile request is preceded by a Stage of the same inputs, sent while this evaluation holds no
share of the device's lock (drawing large inputs on the CPU under it stalls every other
evaluation's timing), and the result is the same as without staging."""

from __future__ import annotations

from typing import Any

import pytest

from evokernel.evaluate import EvalOptions, evaluate
from evokernel.evaluate import protocol as p
from evokernel.evaluate.locks import slot_of
from evokernel.evaluate.process.launch import WorkerProcess
from evokernel.tasks import get_task


def test_inputs_are_staged_outside_the_device_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[p.Message, int]] = []
    lock = slot_of("cpu", None)._lock
    real = WorkerProcess.request

    def request(self: WorkerProcess, message: p.Message, kinds: Any) -> Any:
        sent.append((message, lock._readers))
        return real(self, message, kinds)

    monkeypatch.setattr(WorkerProcess, "request", request)
    task = get_task("decode_linear")
    first = task.scenarios("cpu")[0].name
    options = EvalOptions(seed=4, scenarios=(first,), input_sets=1, reps=1, warmup=0)
    result = evaluate(task.name, task.seed_candidate, "cpu", options)
    assert result.correct, result.reasons

    kinds = [type(m).__name__ for m, _ in sent]
    assert "Check" in kinds and "Prepare" in kinds, kinds
    for i, (message, readers) in enumerate(sent):
        if isinstance(message, p.Stage):
            assert readers == 0, "a Stage was sent under the device's lock"
        if isinstance(message, p.Check | p.Prepare | p.Profile):
            assert readers >= 1, f"{type(message).__name__} was sent without the device's lock"
            staged = sent[i - 1][0]
            assert isinstance(staged, p.Stage), kinds
            if isinstance(message, p.Check):
                want = (message.scenario, message.hidden_seed, [message.seed], message.dtype)
            elif isinstance(message, p.Prepare):
                t = message.timing
                want = (t.scenario, None, t.base_seeds, t.dtype)
            else:
                want = (message.scenario, None, [message.seed], message.dtype)
            assert (staged.scenario, staged.hidden_seed, staged.seeds, staged.dtype) == want
