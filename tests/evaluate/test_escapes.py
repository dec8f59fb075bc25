"""The OS sandbox holds, with the static check on and off: candidates that compute the right
answer (or raise what they found) and also run a shell command, write or delete files outside
their scratch space, read the evaluator's secrets, connect to a listener on 127.0.0.1, leave a
double-forked daemon, kill their parent or kill(-1). They reach the sandbox with the static
check on too (they go through `torch.os`, which a name check does not see).

For each: nothing outside changes, the listener sees no connection, no process survives, the
secret appears nowhere in the result, and the evaluator reports a verdict and goes on (an
honest candidate evaluated in the same batch, after them, passes). The same attempts through
`run_isolated` (a generic task's program) are contained the same way.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from eval_helpers import HONEST, ISOLATED, descendants, marked_processes

from evokernel.evaluate import EvalOptions, EvalResult, evaluate_many, run_isolated
from evokernel.evaluate.static import check_source

TASK = "gqa_decode_attention"
ESCAPES = Path(__file__).parent / "escapes"
NAMES = sorted(p.name for p in ESCAPES.glob("*.py"))
KINDS = ["shell", "write", "delete", "secret", "connect", "daemon", "kill_parent", "kill_all"]


class Listener:
    """A TCP server on 127.0.0.1 that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


@dataclass
class Watched:
    """A directory outside every sandbox, its contents before, a listener and a secret."""

    root: Path
    listener: Listener
    secret: str
    marker: str = field(default_factory=lambda: f"evokernel-mark-{uuid.uuid4().hex[:12]}")

    @classmethod
    def make(cls, root: Path) -> Watched:
        outside = root / "outside"
        outside.mkdir()
        (outside / "victim.txt").write_text("intact")
        (outside / "empty").mkdir()
        return cls(root, Listener(), uuid.uuid4().hex)

    @property
    def outside(self) -> Path:
        return self.root / "outside"

    def state(self) -> dict[str, str]:
        return {
            str(p.relative_to(self.root)): (p.read_text() if p.is_file() else "<dir>")
            for p in sorted(self.root.rglob("*"))
            if "candidates" not in p.parts
        }

    def candidate(self, name: str) -> Path:
        text = (ESCAPES / name).read_text()
        for placeholder, value in (
            ("evokernel-outside", str(self.outside)),
            ("evokernel-port", str(self.listener.port)),
            ("evokernel-mark", self.marker),
        ):
            text = text.replace(placeholder, value)
        path = self.root / "candidates" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return path


@pytest.fixture(scope="module", params=[True, False], ids=["static-on", "static-off"])
def batch(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    watched = Watched.make(tmp_path_factory.mktemp("escapes"))
    before = watched.state()
    options = EvalOptions(
        seed=13,
        static_check=request.param,
        time=False,
        hidden=False,
        input_sets=1,
        scenarios=("b1_ctx16",),
        timeout_s=60,
    )
    files = [watched.candidate(n) for n in NAMES] + [HONEST / "torch_attention.py"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVOKERNEL_TEST_SECRET", watched.secret)
        results = evaluate_many(TASK, files, "cpu", options, workers=2)
    watched.listener.close()
    return watched, before, dict(zip([*NAMES, "honest"], results))


def test_escapes_pass_the_static_check() -> None:
    for name in NAMES:
        assert check_source((ESCAPES / name).read_text()) == [], name


def test_each_escape_gets_a_verdict_and_the_next_candidate_passes(batch) -> None:
    _, _, results = batch
    for name in NAMES:
        result = results[name]
        assert result.stage in ("load", "correctness", "done"), (name, result.stage)
        assert result.correct or result.reasons, name
        assert "landlock" in result.artifacts["sandbox"], result.artifacts
        assert "seccomp" in result.artifacts["sandbox"], result.artifacts
    assert results["honest"].correct, results["honest"].reasons
    assert "process" in results["leaves_daemon.py"].reason_codes
    assert results["reads_secret.py"].reason_codes == ["exception"]


def test_nothing_outside_changes(batch) -> None:
    watched, before, _ = batch
    assert watched.state() == before


def test_the_listener_sees_no_connection(batch) -> None:
    watched, _, _ = batch
    assert watched.listener.accepted == 0


def test_no_process_survives(batch) -> None:
    watched, _, _ = batch
    assert marked_processes(watched.marker) == []
    assert descendants() == []


def test_the_secret_appears_nowhere(batch) -> None:
    watched, _, results = batch
    for name, result in results.items():
        assert watched.secret not in result.to_json(), name
    secret = results["reads_secret.py"]
    assert "the evaluator's secrets" in secret.reasons[0]  # its message did arrive, empty


@pytest.mark.parametrize("static", [True, False], ids=["static-on", "static-off"])
def test_the_cli_keeps_the_evaluators_environment_secret(static: bool) -> None:
    # Here the secret is in the evaluator's initial environment (/proc/PID/environ shows it).
    secret = uuid.uuid4().hex
    env = {**os.environ, "EVOKERNEL_TEST_SECRET": secret, "SOME_API_KEY": f"sk-{secret}"}
    cmd = [sys.executable, "-m", "evokernel", "eval", TASK, str(ESCAPES / "reads_secret.py"),
           "--device", "cpu", "--json", "--no-time", "--scenarios", "b1_ctx16"]  # fmt: skip
    if not static:
        cmd.append("--no-static")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert secret not in proc.stdout + proc.stderr
    assert proc.stderr.startswith("sandbox: ") and "landlock" in proc.stderr
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r.split(":")[0] for r in data["reasons"]] == ["exception"]


@pytest.fixture(scope="module")
def isolated(tmp_path_factory: pytest.TempPathFactory):
    watched = Watched.make(tmp_path_factory.mktemp("isolated"))
    before = watched.state()
    outcomes = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVOKERNEL_TEST_SECRET", watched.secret)
        for kind in KINDS:
            args = [kind, str(watched.outside), watched.listener.port, watched.marker]
            outcomes[kind] = run_isolated(ISOLATED / "escapes.py", "attempt", args, timeout_s=30)
    watched.listener.close()
    return watched, before, outcomes


def test_run_isolated_contains_the_same_attempts(isolated) -> None:
    watched, before, outcomes = isolated
    assert watched.state() == before
    assert watched.listener.accepted == 0
    assert marked_processes(watched.marker) == []
    assert descendants() == []
    for kind, out in outcomes.items():
        text = f"{out.value} {out.reason} {out.traceback} {out.stdout_tail} {out.stderr_tail}"
        assert watched.secret not in text, kind
        assert "landlock" in out.sandbox and "seccomp" in out.sandbox
        if kind != "secret":
            assert out.ok, (kind, out.reason)
    assert not outcomes["secret"].ok and "found" in (outcomes["secret"].reason or "")


def test_result_json_round_trips_with_the_sandbox_artifact(batch) -> None:
    _, _, results = batch
    honest = results["honest"]
    assert EvalResult.from_json(honest.to_json()) == honest
