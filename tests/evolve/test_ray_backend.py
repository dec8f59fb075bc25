"""The `ray` backend against a real Ray cluster on this machine (a head started with
`ray start --head --block`, its raylet and worker processes), driven through the CLI:

  * a short offline search through the cluster gives the same programs as the local backend
    with the same seed;
  * a Ray worker killed (SIGKILL) in the middle of an evaluation: the evaluation is re-queued,
    the run completes, and nothing is lost or changed;
  * a kernel task's evaluation (CPU interpreter) runs in a Ray worker.

One cluster serves the whole module (starting one takes 10-20 s on 2 cores).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from test_generic import EVALUATOR, PROGRAM

pytest.importorskip("ray")
pytestmark = pytest.mark.slow

SLOW_EVALUATOR = EVALUATOR.replace(
    "def evaluate(path):\n", "def evaluate(path):\n    import time\n\n    time.sleep(1.5)\n"
)
CONFIG = "in_flight: 2\nislands:\n  count: 2\nmutators:\n  offline:\n    jump_prob: 0.5\n"
ITERATIONS = 8


def _ray_env(base: Path) -> dict[str, str]:
    """Token authentication with a private token file, no usage reports."""
    token = base / "token"
    if not token.exists():
        token.write_text(secrets.token_hex(32))
    env = dict(os.environ)
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=str(token),
        RAY_USAGE_STATS_ENABLED="0",
    )
    return env


@pytest.fixture(scope="module")
def cluster():
    # A short base path: Ray's unix sockets live under it (108-byte limit).
    base = Path(tempfile.mkdtemp(prefix="ekray-", dir="/tmp"))
    env = _ray_env(base)
    log = open(base / "head.log", "w")  # noqa: SIM115 - closed at teardown
    ray = Path(sys.executable).with_name("ray")
    cmd = [str(ray), "start", "--head", "--block", "--port", "0", "--num-cpus", "2"]
    cmd += ["--include-dashboard", "false", "--disable-usage-stats", "--temp-dir", str(base)]
    cmd += ["--object-store-memory", str(100 << 20)]
    head = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        address = None
        deadline = time.monotonic() + 120
        while address is None and time.monotonic() < deadline and head.poll() is None:
            time.sleep(0.5)
            found = re.search(r"ray start --address='([^']+)'", (base / "head.log").read_text())
            address = found.group(1) if found else None
        assert address, (base / "head.log").read_text()[-2000:]
        yield address, env
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # `ray start --block` stops what it started...
        try:
            head.wait(timeout=10)
        except subprocess.TimeoutExpired:  # ...slowly on a busy machine: the group goes now
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=30)
        log.close()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    d = tmp_path_factory.mktemp("toy")
    (d / "prog.py").write_text(PROGRAM)
    (d / "ev.py").write_text(EVALUATOR)
    (d / "ev_slow.py").write_text(SLOW_EVALUATOR)
    (d / "c.yaml").write_text(CONFIG)
    return d


def _evolve(toy: Path, out: Path, env: dict[str, str], *extra: str, evaluator: str = "ev.py"):
    cmd = [sys.executable, "-m", "evokernel", "evolve", "--program", str(toy / "prog.py")]
    cmd += ["--evaluator", str(toy / evaluator), "--config", str(toy / "c.yaml")]
    cmd += ["--device", "cpu", "--seed", "4", "--iterations", str(ITERATIONS), "--json"]
    return [*cmd, "--out", str(out), *extra]


def _signature(run_dir: Path) -> list[tuple]:
    """Every row as the search sees it, in commit order."""
    from evokernel.evolve.database import Database

    db = Database(run_dir / "programs.sqlite", readonly=True)
    try:
        return [
            (p.id, p.iteration, p.island, p.parent_ids, p.code_hash, p.status, p.fitness, p.reasons)
            for p in db.programs
        ]
    finally:
        db.close()


@pytest.fixture(scope="module")
def local_run(toy, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "local"
    done = subprocess.run(
        _evolve(toy, out, dict(os.environ), "--backend", "local"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_ray_and_local_runs_give_the_same_programs(cluster, toy, local_run, tmp_path):
    address, env = cluster
    out = tmp_path / "ray"
    done = subprocess.run(
        _evolve(toy, out, env, "--backend", "ray", "--ray-address", address),
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "ray backend: " in done.stdout and "1 node(s)" in done.stdout
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["iterations_done"] == ITERATIONS and summary["finished"]
    assert _signature(out) == _signature(local_run)
    from evokernel.evolve.database import Database

    db = Database(out / "programs.sqlite", readonly=True)
    try:
        where = [p.evaluated_on for p in db.programs if p.evaluated_here]
    finally:
        db.close()
    assert where and all(w["backend"] == "ray" and w["node"] for w in where)


def _ray_task_pids() -> list[int]:
    """Ray worker processes running an evaluation now (the process title Ray sets)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(b"ray::_Evaluator.evaluate"):
            pids.append(int(entry.name))
    return pids


def test_a_killed_ray_worker_is_requeued_and_nothing_is_lost(cluster, toy, local_run, tmp_path):
    address, env = cluster
    out = tmp_path / "killed"
    cmd = _evolve(toy, out, env, "--backend", "ray", "--ray-address", address)
    cmd[cmd.index(str(toy / "ev.py"))] = str(toy / "ev_slow.py")
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    killed = None
    try:
        deadline = time.monotonic() + 300
        while killed is None and time.monotonic() < deadline and run.poll() is None:
            # Wait until the seed is stored, so the kill hits an iteration's evaluation.
            if (out / "programs" / "seed.py").exists():
                busy = _ray_task_pids()
                if busy:
                    time.sleep(0.5)  # well inside the evaluation (it sleeps 1.5 s)
                    os.kill(busy[0], signal.SIGKILL)
                    killed = busy[0]
            time.sleep(0.1)
        stdout, stderr = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
    assert killed is not None, "no evaluation was seen running on a Ray worker"
    assert run.returncode == 0, stdout[-2000:] + stderr[-2000:]
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["iterations_done"] == ITERATIONS and summary["finished"]
    assert summary["requeued"] >= 1
    assert "re-queued after worker or node faults" in stdout
    # Nothing lost, nothing changed: the same programs as a run that was never disturbed.
    assert _signature(out) == _signature(local_run)


def test_a_kernel_task_is_evaluated_through_ray(cluster, tmp_path):
    """The kernel evaluator (Triton interpreter, its own sandboxed process) inside a Ray
    worker: the seed's evaluation, the costly part of a kernel search on 2 cores."""
    from evokernel.tasks import get_task

    address, env = cluster
    out = tmp_path / "kernel"
    (tmp_path / "c.yaml").write_text("islands:\n  count: 1\nevaluator:\n  timeout_s: 300\n")
    cmd = [sys.executable, "-m", "evokernel", "evolve", "--task", "decode_linear"]
    cmd += ["--config", str(tmp_path / "c.yaml"), "--device", "cpu", "--iterations", "0"]
    cmd += ["--out", str(out), "--backend", "ray", "--ray-address", address, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["evaluated"] == 1 and summary["valid"] == 1, summary
    assert "correctness only" in done.stdout
    assert summary["task"] == "decode_linear"
    assert (out / "best.py").read_text() == get_task("decode_linear").seed_candidate.read_text()


def test_a_worker_that_cannot_run_jobs_stops_the_run_with_one_line(cluster, toy):
    """The generic evaluator differs on the worker (as on a node without the shared file):
    re-queuing cannot help, so the evaluation fails with BackendError naming the cause."""
    address, env = cluster
    script = f"""
from pathlib import Path
from evokernel.evolve.backends.base import BackendError
from evokernel.evolve.backends.raycluster import RayBackend
from evokernel.evolve.config import config_from_dict
from evokernel.evolve.generic import GenericProblem

toy = Path({str(toy)!r})
problem = GenericProblem.from_files(toy / "prog.py", toy / "ev.py", "cpu", config_from_dict({{}}))
problem.evaluator_sha256 = "0" * 64
backend = RayBackend("cpu", {address!r}, workers=1)
print(backend.describe())
try:
    backend.submit(problem, (toy / "prog.py").read_text()).result(timeout=300)
except BackendError as err:
    print("BackendError:", err)
finally:
    backend.close()
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env
    )
    assert "1 node(s)" in done.stdout, done.stderr[-2000:]
    assert "BackendError: a Ray worker cannot evaluate: JobError: the evaluator" in done.stdout
    assert "ev.py on this worker differs from the run's" in done.stdout


def test_the_first_job_also_warms_every_other_actor(cluster, toy):
    """The seed's job goes to the other actor too (its cold start overlaps the seed's
    evaluation); later jobs are not copied, and the warm-up's result never reaches the run."""
    address, env = cluster
    script = f"""
import json
from pathlib import Path
from evokernel.evolve.backends.raycluster import RayBackend
from evokernel.evolve.config import config_from_dict
from evokernel.evolve.generic import GenericProblem

toy = Path({str(toy)!r})
problem = GenericProblem.from_files(toy / "prog.py", toy / "ev.py", "cpu", config_from_dict({{}}))
code = (toy / "prog.py").read_text()
backend = RayBackend("cpu", {address!r}, workers=2)
try:
    first = backend.submit(problem, code).result(timeout=300)
    second = backend.submit(problem, code).result(timeout=300)
    warm = [json.loads(backend.ray.get(ref, timeout=300)) for ref in backend._warm_ups]
    print(json.dumps({{"warm": len(warm), "warm_ok": [bool(w["result"]) for w in warm],
                       "first": first.result.correct, "second": second.result.correct}}))
finally:
    backend.close()
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"warm": 1, "warm_ok": [True], "first": True, "second": True}
