"""Bad input to `evokernel evolve` and `evokernel status`, through the command line: each is
one `error: ...` line on stderr with exit 2 (and leaves nothing behind), or the right
behaviour; never a traceback."""

from __future__ import annotations

import io
import json
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from evolve_fakes import FakeProblem, mset
from test_generic import EVALUATOR, PROGRAM

from evokernel.cli import main
from evokernel.evolve.config import config_from_dict
from evokernel.evolve.session import create_session


@pytest.fixture
def toy(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "ev.py").write_text(EVALUATOR)
    return tmp_path


def _evolve(toy: Path, *extra: str) -> list[str]:
    argv = ["evolve", "--program", str(toy / "prog.py"), "--evaluator", str(toy / "ev.py")]
    return [*argv, "--device", "cpu", *extra]


def _error(capsys, argv: list[str]) -> str:
    """Run the CLI; it must fail with exit 2 and exactly one `error:` line on stderr."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _fake_run(path: Path, iterations: int = 4, spec: dict | None = None) -> None:
    """A finished run made in-process (no evaluator processes)."""
    problem = FakeProblem(device="cpu")
    if spec is not None:
        problem.spec = lambda: spec  # type: ignore[method-assign]
    cfg = config_from_dict({"islands": {"count": 2}, "budget": {"iterations": iterations}})
    session = create_session(path, problem, cfg)
    try:
        session.execute(mutators=mset(), stream=io.StringIO(), live=False)
    finally:
        session.close()


# --- flags -------------------------------------------------------------------------------------
def test_absurd_iteration_counts_are_refused_before_anything_starts(toy, capsys):
    out = toy / "run"
    line = _error(capsys, _evolve(toy, "--iterations", "99999999999999999999", "--out", str(out)))
    assert line == "error: --iterations must be in [0, 1000000], got 99999999999999999999"
    assert not out.exists()
    assert "--iterations must be in" in _error(capsys, _evolve(toy, "--iterations", "-1"))


def test_the_largest_target_starts_at_once(tmp_path):
    """Pending iterations are produced lazily: a million-iteration target costs nothing."""
    cfg = config_from_dict({"budget": {"iterations": 1_000_000, "wall_time_s": 0.5}})
    session = create_session(tmp_path / "run", FakeProblem(delay_s=0.05), cfg)
    try:
        out = session.execute(mutators=mset(), stream=io.StringIO(), live=False)
    finally:
        session.close()
    assert out.stop_reason == "wall-time" and 1 <= out.summary.iterations_done < 100


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--seed", "-1"], "error: --seed must be in [0, 9223372036854775807], got -1"),
        (["--seed", str(10**30)], "error: --seed must be in [0, 9223372036854775807]"),
        (["--ray-address", "10.0.0.1:6379"], "--ray-address is for the ray backend"),
        (["--out", "/proc/x"], "error: cannot create run directory /proc/x: "),
        (["--backend", "ray", "--ray-address", "127.0.0.1:1"], "cannot reach the Ray cluster"),
        (["--backend", "ray", "--ray-address", "nonsense"], "is not HOST:PORT, ray://HOST:PORT"),
    ],
)
def test_bad_flags_are_one_line(toy, capsys, extra, needle):
    if "ray" in extra:
        pytest.importorskip("ray")
    assert needle in _error(capsys, _evolve(toy, "--iterations", "1", *extra))


def test_the_ray_backend_without_ray_says_how_to_install_it(toy, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if not installed
    line = _error(capsys, _evolve(toy, "--backend", "ray", "--out", str(toy / "run")))
    assert line == (
        "error: the ray backend needs Ray on this machine: pip install 'evokernel[ray]'"
    )
    assert not (toy / "run").exists()


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"\x00\x01binary\xff\xfe", "is not a text file (not UTF-8)"),
        (None, "is not a regular file"),
        (b"# EVOLVE-BLOCK-START\nA = 3  # tune: 1, 2\n# EVOLVE-BLOCK-END\n", "line 2"),
    ],
)
def test_unusable_program_files_are_one_line(toy, capsys, content, needle):
    bad = toy / "bad.py"
    if content is None:
        bad.mkdir()
    else:
        bad.write_bytes(content)
    argv = ["evolve", "--program", str(bad), "--evaluator", str(toy / "ev.py"), "--device", "cpu"]
    assert needle in _error(capsys, argv)
    task_argv = ["evolve", "--task", "decode_linear", "--program", str(bad), "--device", "cpu"]
    assert needle in _error(capsys, task_argv)


# --- config files --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xd8", "c.yaml: not a text file (not UTF-8)"),
        (b"islands:\n  count: 2\nseed: 1\nislands:\n  count: 3\n", "key 'islands' given twice"),
        (b"islands:\n  count: 2\n  count: 3\n", "key 'count' given twice (lines 2 and 3)"),
        (b"mutators:\n  prompt:\n    template_dir: /nonexistent\n", "no such directory"),
        (b"- 1\n- 2\n", "the top level: expected a mapping"),
    ],
)
def test_bad_config_files_are_one_line(toy, capsys, content, needle):
    (toy / "c.yaml").write_bytes(content)
    out = toy / "run"
    assert needle in _error(
        capsys, _evolve(toy, "--config", str(toy / "c.yaml"), "--out", str(out))
    )
    assert not out.exists()
    (toy / "dir.yaml").mkdir()
    assert "cannot read config" in _error(capsys, _evolve(toy, "--config", str(toy / "dir.yaml")))


def test_template_files_with_unknown_names_are_refused(toy, capsys):
    (toy / "templates").mkdir()
    (toy / "templates" / "sytem.txt").write_text("typo")
    (toy / "c.yaml").write_text(f"mutators:\n  prompt:\n    template_dir: {toy / 'templates'}\n")
    line = _error(capsys, _evolve(toy, "--config", str(toy / "c.yaml"), "--out", str(toy / "r")))
    assert "sytem.txt is not a template name" in line


# --- run databases -------------------------------------------------------------------------------
def _damaged(tmp_path: Path, kind: str) -> Path:
    run = tmp_path / kind
    if kind == "truncated":
        _fake_run(run)
        data = (run / "programs.sqlite").read_bytes()
        (run / "programs.sqlite").write_bytes(data[: len(data) // 2])
    else:
        run.mkdir()
        (run / "programs.sqlite").write_bytes(b"" if kind == "empty" else b"garbage " * 512)
    return run


@pytest.mark.parametrize(
    ("kind", "needle"),
    [
        ("garbage", "is not a readable run database (file is not a database)"),
        ("empty", "is empty: not a run database"),
        ("truncated", "programs.sqlite"),
    ],
)
def test_damaged_databases_are_reported_and_never_written(tmp_path, capsys, kind, needle):
    run = _damaged(tmp_path, kind)
    before = (run / "programs.sqlite").read_bytes()
    assert needle in _error(capsys, ["status", str(run)])
    assert needle in _error(capsys, ["evolve", "--resume", "--out", str(run), "--device", "cpu"])
    assert (run / "programs.sqlite").read_bytes() == before


def test_an_older_database_without_new_columns_is_read_and_migrated(tmp_path, capsys):
    run = tmp_path / "old"
    _fake_run(run, iterations=2)
    conn = sqlite3.connect(run / "programs.sqlite")
    conn.execute("ALTER TABLE programs DROP COLUMN evaluated_on")
    conn.commit()
    conn.close()
    assert main(["status", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert data["iterations_done"] == 2 and data["requeued"] == 0
    from evokernel.evolve.database import Database

    Database(run / "programs.sqlite").close()  # a read-write open adds the column
    conn = sqlite3.connect(run / "programs.sqlite")
    columns = {r[1] for r in conn.execute("PRAGMA table_info(programs)")}
    conn.close()
    assert "evaluated_on" in columns


def test_status_names_what_is_missing(tmp_path, capsys):
    missing = tmp_path / "nothing"
    assert _error(capsys, ["status", str(missing)]) == f"error: no such run directory: {missing}"
    (tmp_path / "file").write_text("x")
    assert "is not a run directory" in _error(capsys, ["status", str(tmp_path / "file")])


# --- resuming ------------------------------------------------------------------------------------
def test_resume_refuses_another_task_program_or_evaluator(toy, capsys):
    run = toy / "run"
    assert main(_evolve(toy, "--iterations", "0", "--out", str(run))) == 0
    capsys.readouterr()
    resume = ["evolve", "--resume", "--out", str(run), "--device", "cpu"]
    line = _error(capsys, [*resume, "--task", "decode_linear"])
    assert "runs the generic program generic:prog; --task cannot change a run" in line
    (toy / "other.py").write_text(PROGRAM.replace("A = 1 ", "A = 2 "))
    line = _error(capsys, [*resume, "--program", str(toy / "other.py")])
    assert "started from other code" in line and "--program cannot change a run" in line
    (toy / "ev2.py").write_text(EVALUATOR)
    line = _error(capsys, [*resume, "--evaluator", str(toy / "ev2.py")])
    assert "--evaluator cannot change a run" in line
    line = _error(capsys, [*resume, "--iterations", "3", "--seed", "5"])
    assert "--seed cannot change it" in line
    # The same files are accepted: the finished run just reports.
    same = [*resume, "--program", str(toy / "prog.py"), "--evaluator", str(toy / "ev.py")]
    assert main(same) == 0
    assert "already finished" in capsys.readouterr().out


def test_resume_refuses_another_kernel_task_and_a_shrinking_target(tmp_path, capsys):
    run = tmp_path / "run"
    _fake_run(run, iterations=4, spec={"kind": "kernel", "task": "decode_linear"})
    resume = ["evolve", "--resume", "--out", str(run), "--device", "cpu"]
    line = _error(capsys, [*resume, "--task", "gqa_decode_attention"])
    assert line.endswith("runs decode_linear; --task cannot change a run")
    line = _error(capsys, [*resume, "--iterations", "2"])
    assert "--iterations 2 is below the 4 iterations" in line


# --- evaluator results ---------------------------------------------------------------------------
def test_a_score_too_large_for_a_float_is_a_failure_not_a_crash(toy, capsys):
    (toy / "ev.py").write_text("def evaluate(path):\n    return {'combined_score': 10**400}\n")
    run = toy / "run"
    line = _error(capsys, _evolve(toy, "--iterations", "2", "--out", str(run)))
    assert "seed program is not correct" in line and "no finite combined_score" in line
    assert main(["status", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert data["state"] == "finished (seed-failed)"


class _SameDiff(BaseHTTPRequestHandler):
    """An LLM that proposes the same edit whatever it is shown."""

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        answer = "<<<<<<< SEARCH\nB = 3  # tune: 0, 1, 2, 3\n=======\nB = 1  # tune: 0, 1, 2, 3\n"
        answer += ">>>>>>> REPLACE\n"
        body = json.dumps(
            {
                "choices": [{"message": {"role": "assistant", "content": answer}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_children_that_repeat_earlier_code_are_counted_as_reused(toy, capsys):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SameDiff)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = f"http://127.0.0.1:{server.server_address[1]}/v1"
        (toy / "c.yaml").write_text(
            "islands:\n  count: 3\nmutators:\n  weights:\n    llm_diff: 1.0\n"
            f"llm:\n  api_base: {api}\n  models:\n    - name: stub\n"
        )
        run = toy / "run"
        argv = _evolve(toy, "--config", str(toy / "c.yaml"), "--iterations", "3", "--out", str(run))
        assert main(argv) == 0
    finally:
        server.shutdown()
    out = capsys.readouterr().out
    assert "3/3 iterations, 2 evaluated (2 valid, 0 failed), 2 reused, 0 rejected" in out
    assert main(["status", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert data["evaluated"] == 2 and data["reused"] == 2 and data["duplicates"] == 0
