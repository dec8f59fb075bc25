"""The warm pool: workers that finished their trusted set-up before a candidate arrives. Each
serves one candidate only; one that died or hung while waiting is replaced without blaming the
candidate. Real worker processes throughout."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator

from eval_helpers import HONEST, descendants

from evokernel.evaluate import EvalOptions, api, evaluate, plan
from evokernel.evaluate import protocol as p
from evokernel.evaluate.process import pool as pool_module
from evokernel.evaluate.process.launch import WorkerProcess
from evokernel.evaluate.process.pool import POOL, Spec, WarmPool, start
from evokernel.evaluate.process.procs import snapshot
from evokernel.tasks import get_task

TASK = "gqa_decode_attention"
HONEST_FILE = HONEST / "torch_attention.py"


def spec(**changes: object) -> Spec:
    fields: dict[str, object] = dict(
        mode="eval", task=TASK, device="cpu", dtype="torch.float32", device_memory_mb=1024,
        threads=1, memory_mb=3000, disk_mb=256, cuda_visible=None, startup_timeout_s=120.0,
    )  # fmt: skip
    fields.update(changes)
    return Spec(**fields)  # type: ignore[arg-type]


def wait_for_waiting(pool: WarmPool, timeout_s: float = 120.0) -> list:
    deadline = time.monotonic() + timeout_s
    while not pool.waiting():
        assert time.monotonic() < deadline, "no worker became ready in the pool"
        time.sleep(0.1)
    return pool.waiting()


def test_a_worker_is_handed_out_once_and_a_spare_waits_ready() -> None:
    pool = WarmPool(start)
    s = spec()
    seen = []
    for _ in range(3):
        with pool.lease(s) as warm:
            assert warm.alive() and warm.ready.sandbox
            seen.append(warm.process.proc.pid)
            assert all(w.process is not warm.process for w in pool.waiting())
            warm.process.close()
    assert len(set(seen)) == 3  # never the same worker twice
    spare = wait_for_waiting(pool)[0]  # started ahead after the second hand-out
    assert spare.process.proc.pid not in seen
    pool.drain()
    assert pool.waiting() == [] and descendants() == []


class _FakeProcess:
    def set_deadline(self, *_args: object) -> None: ...
    def clear_deadline(self) -> None: ...
    def close(self) -> None: ...


class _FakeReady:
    process = _FakeProcess()

    def alive(self) -> bool:
        return True


def test_spares_started_ahead_are_twice_the_leases_running_within_capacity(monkeypatch) -> None:
    """A start-up is longer than a small evaluation: one spare per running lease falls behind,
    so the pool keeps two per lease (at most `capacity()`), and none before a second lease."""
    starts: list[Spec] = []

    def starter(s: Spec) -> _FakeReady:
        starts.append(s)
        return _FakeReady()

    monkeypatch.setattr(pool_module, "capacity", lambda: 5)
    pool = WarmPool(starter)  # type: ignore[arg-type]
    s = spec()
    with pool.lease(s):
        assert len(starts) == 1  # the first lease: its own worker, no spare
    with pool.lease(s):  # the second: one running, two spares
        deadline = time.monotonic() + 10
        while len(starts) < 1 + 1 + 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(starts) == 4
        with pool.lease(s), pool.lease(s), pool.lease(s):  # four running: capacity bounds it
            time.sleep(0.2)
            assert len(pool._ready[s]) == 5
    pool.shutdown()


def _options() -> EvalOptions:
    # memory_mb makes this test's pool spec its own; startup_timeout_s bounds the ack wait.
    return EvalOptions(
        seed=8, time=False, hidden=False, input_sets=1, scenarios=("b1_ctx16",),
        memory_mb=2999, startup_timeout_s=20.0,
    )  # fmt: skip


def _spare_after_two_evaluations() -> int:
    for _ in range(2):
        assert evaluate(TASK, HONEST_FILE, "cpu", _options()).correct
    return wait_for_waiting(POOL)[0].process.proc.pid


def _tree(root: int) -> list[int]:
    table = snapshot()
    found, stack = [root], [root]
    while stack:
        parent = stack.pop()
        for st in table.values():
            if st.ppid == parent:
                found.append(st.pid)
                stack.append(st.pid)
    return found


def test_a_worker_that_died_while_waiting_is_replaced_without_blame() -> None:
    spare = _spare_after_two_evaluations()
    for pid in _tree(spare):
        os.kill(pid, signal.SIGKILL)
    result = evaluate(TASK, HONEST_FILE, "cpu", _options())
    assert result.correct, result.reasons
    assert descendants() == []


def test_a_worker_that_hung_while_waiting_is_replaced_without_blame() -> None:
    spare = _spare_after_two_evaluations()
    for pid in _tree(spare):
        os.kill(pid, signal.SIGSTOP)  # alive, but it will never acknowledge a candidate
    result = evaluate(TASK, HONEST_FILE, "cpu", _options())
    assert result.correct, result.reasons
    # The stopped worker was handed out first: its silence cost the acknowledgement limit.
    assert json.loads(result.artifacts["phases"])["startup"] >= 15
    assert descendants() == []


class _RecordingSlot:
    """Stands for the device slot: records whether its shared side is held."""

    def __init__(self) -> None:
        self.held = False

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        self.held = True
        try:
            yield
        finally:
            self.held = False


def test_only_the_device_part_of_start_up_holds_the_device(monkeypatch) -> None:
    """Imports run freely; the device part (Warm) holds the device's shared lock, so a worker
    starting ahead never runs GPU work while a candidate is timed."""
    slot = _RecordingSlot()
    seen: list[tuple[str, bool]] = []
    request = WorkerProcess.request

    def recording(self, message, kinds):  # type: ignore[no-untyped-def]
        seen.append((message.op, slot.held))
        return request(self, message, kinds)

    monkeypatch.setattr(pool_module, "slot_of", lambda kind, visible: slot)
    monkeypatch.setattr(WorkerProcess, "request", recording)
    ready = start(spec())
    ready.process.close()
    assert seen == [("init", False), ("warm", True)]
    assert ready.facts is not None and ready.facts.kind == "cpu"


def test_start_up_calls_the_baselines_on_each_timed_shape_in_holds_of_their_own(
    monkeypatch,
) -> None:
    """A GPU worker's spec names the timed scenarios: start-up calls the baselines once on each
    (per-shape library set-up, paid by a spare), one shared hold per scenario, before the Warm
    that installs the guards; after that Warm, a scenario Warm is refused. (On a GPU the spec
    names every public scenario, plan.warm_scenarios; here a CPU worker stands in.)"""
    slot = _RecordingSlot()
    seen: list[tuple[str, str, bool]] = []
    request = WorkerProcess.request

    def recording(self, message, kinds):  # type: ignore[no-untyped-def]
        seen.append((message.op, getattr(message, "scenario", ""), slot.held))
        return request(self, message, kinds)

    monkeypatch.setattr(pool_module, "slot_of", lambda kind, visible: slot)
    monkeypatch.setattr(WorkerProcess, "request", recording)
    names = tuple(s.name for s in get_task(TASK).scenarios("cpu")[:2])
    ready = start(spec(warm_scenarios=names))
    try:
        shapes = [("warm", n, True) for n in names]
        assert seen == [("init", "", False), *shapes, ("warm", "", True)]
        late = ready.process.request(p.Warm(scenario=names[0]), (p.Warmed, p.Error))
        assert isinstance(late, p.Error) and "unexpected Warm" in late.detail
    finally:
        ready.process.close()
    # And the GPU spec: every public scenario (at the timed dtype), none on the CPU.
    task = get_task(TASK)
    assert plan.warm_scenarios(task, "cuda", EvalOptions()) == tuple(
        s.name for s in task.scenarios("cuda")
    )
    assert plan.warm_scenarios(task, "cpu", EvalOptions()) == ()


def test_workers_and_spares_are_sized_to_the_cores(monkeypatch) -> None:
    monkeypatch.setattr(api, "slot_count", lambda kind: 2)
    for cores, spares, per_gpu in ((2, 1, 1), (16, 8, 4), (64, 8, 8), (256, 8, 8)):
        monkeypatch.setattr(os, "cpu_count", lambda n=cores: n)
        assert pool_module.capacity() == spares
        assert api.default_workers("cuda") == 2 * per_gpu
        assert api.worker_threads("cuda") == max(1, cores // (2 * per_gpu))
    assert api.default_workers("cpu") == 1
