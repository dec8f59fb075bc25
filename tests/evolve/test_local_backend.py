"""The `local` backend: every evaluation worker asks the evaluator for its own GPU, faults are
re-queued a bounded number of times, and a backend that cannot evaluate stops the run with one
line and a recorded reason."""

from __future__ import annotations

import io
import threading
from collections import defaultdict

import pytest
from evolve_fakes import FakeProblem, fake_result, mset

import evokernel.evaluate
from evokernel.errors import EvokernelError
from evokernel.evolve.backends.base import BackendError
from evokernel.evolve.backends.local import LocalBackend
from evokernel.evolve.config import config_from_dict
from evokernel.evolve.problem import KernelProblem
from evokernel.evolve.session import create_session
from evokernel.evolve.status import read_status
from evokernel.tasks import get_task


def test_each_local_worker_asks_the_evaluator_for_its_own_gpu(monkeypatch):
    """Through the real KernelProblem -> jobs.run_job -> evokernel.evaluate.evaluate path."""
    workers = 3
    together = threading.Barrier(workers, timeout=30)  # every worker busy at the same time
    asked: list[tuple[str, int]] = []
    lock = threading.Lock()

    def recording_evaluate(task, candidate, device=None, options=None, gpu=0):
        with lock:
            asked.append((threading.current_thread().name, gpu))
        together.wait()
        return fake_result(candidate, "cpu")

    monkeypatch.setattr(evokernel.evaluate, "evaluate", recording_evaluate)
    problem = KernelProblem("decode_linear", "cpu", config_from_dict({}))
    backend = LocalBackend(workers=workers, gpus=workers)
    seed = get_task("decode_linear").seed_candidate.read_text()
    futures = [backend.submit(problem, seed + f"# variant {i}\n") for i in range(2 * workers)]
    evaluations = [f.result(timeout=60) for f in futures]
    assert sorted(gpu for _, gpu in asked) == [0, 0, 1, 1, 2, 2]
    by_thread = defaultdict(set)
    for thread, gpu in asked:
        by_thread[thread].add(gpu)
    assert sorted(g for gpus in by_thread.values() for g in gpus) == [0, 1, 2]
    assert sorted(e.where["gpu"] for e in evaluations) == [0, 0, 1, 1, 2, 2]
    assert all(e.where["backend"] == "local" and e.attempts == 1 for e in evaluations)


def test_workers_beyond_the_gpus_share_them_round_robin():
    backend = LocalBackend(workers=5, gpus=2)
    assert [backend.gpu_of(w) for w in range(5)] == [0, 1, 0, 1, 0]
    assert LocalBackend(workers=2, gpus=0).gpu_of(1) is None  # CPU slots


def _cfg(**over):
    base = {
        "islands": {"count": 2},
        "budget": {"iterations": 8},
        "checkpoint": {"write_sources": False},
    }
    base.update(over)
    return config_from_dict(base)


def _run(tmp_path, problem, cfg, backend):
    session = create_session(tmp_path / "run", problem, cfg, backend)
    try:
        return session.execute(mutators=mset(), stream=io.StringIO(), live=False), session
    finally:
        session.close()


def test_a_search_spreads_its_evaluations_over_every_gpu(tmp_path):
    problem = FakeProblem(delay_s=0.05)
    cfg = _cfg(evaluator={"workers": 2}, in_flight=2)
    out, session = _run(tmp_path, problem, cfg, LocalBackend(workers=2, gpus=2))
    assert {c["gpu"] for c in problem.calls} == {0, 1}
    rows = [p for p in session.db.programs if p.evaluated_here]
    assert {p.evaluated_on["gpu"] for p in rows} == {0, 1}
    assert out.summary.requeued == 0


class FlakyProblem(FakeProblem):
    """The evaluator itself raises on the first attempt of every third program."""

    def __init__(self):
        super().__init__()
        self.attempts: dict[str, int] = defaultdict(int)

    def evaluate(self, code, **kwargs):
        self.attempts[code] += 1
        if len(self.attempts) % 3 == 0 and self.attempts[code] == 1:
            raise OSError("No space left on device")
        return super().evaluate(code, **kwargs)


def test_an_infrastructure_fault_is_requeued_and_counted(tmp_path):
    problem = FlakyProblem()
    out, session = _run(tmp_path, problem, _cfg(), LocalBackend(workers=1, gpus=0))
    assert out.summary.iterations_done == 8 and out.summary.requeued >= 1
    retried = [p for p in session.db.programs if p.evaluated_on.get("attempts", 1) > 1]
    assert retried and all(p.status == "ok" for p in retried)
    assert "No space left on device" in retried[0].evaluated_on["faults"][0]
    assert "re-queued after worker or node faults" in out.text()


class BrokenEvaluator(FakeProblem):
    def evaluate(self, code, **kwargs):
        if code != self.seed_code:
            raise RuntimeError("evaluator bug")
        return super().evaluate(code, **kwargs)


def test_an_evaluation_that_keeps_failing_is_given_up_as_infrastructure(tmp_path):
    out, session = _run(tmp_path, BrokenEvaluator(), _cfg(), LocalBackend(1, 0, max_retries=2))
    assert out.summary.iterations_done == 8
    lost = [p for p in session.db.programs if p.evaluated_here and p.status == "failed"]
    assert lost and all(p.reasons[0].startswith("infrastructure: ") for p in lost)
    assert all(p.evaluated_on["attempts"] == 3 for p in lost)
    assert all(p.fitness is None for p in lost)


class UnusableProblem(FakeProblem):
    def evaluate(self, code, **kwargs):
        if code != self.seed_code:
            raise EvokernelError("the run's evaluator /x/ev.py is gone")
        return super().evaluate(code, **kwargs)


def test_a_backend_that_cannot_evaluate_stops_the_run_and_says_why(tmp_path):
    with pytest.raises(BackendError, match=r"evaluator /x/ev\.py is gone"):
        _run(tmp_path, UnusableProblem(), _cfg(), LocalBackend(workers=1, gpus=0))
    text, data = read_status(tmp_path / "run")
    assert data["stop_reason"] == "error" and "ev.py is gone" in data["error"]
    assert (
        "stopped (error: the run's evaluator /x/ev.py is gone); "
        "continue with evokernel evolve --resume --out" in text
    )


class DeadEvaluator(FakeProblem):
    def evaluate(self, code, **kwargs):
        raise RuntimeError("worker start-up failed")


def test_a_seed_that_cannot_be_evaluated_is_not_stored_and_the_run_can_resume(tmp_path):
    with pytest.raises(EvokernelError, match="the seed could not be evaluated"):
        _run(tmp_path, DeadEvaluator(), _cfg(), LocalBackend(workers=1, gpus=0, max_retries=1))
    text, data = read_status(tmp_path / "run")
    assert data["evaluated"] == 0 and not data["finished"]
    assert "stopped (error: the seed could not be evaluated" in text
