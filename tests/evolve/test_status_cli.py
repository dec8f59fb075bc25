"""`evokernel status RUN_DIR [--json]` on a finished and on an interrupted run."""

from __future__ import annotations

import io
import json

from evolve_fakes import FakeProblem, mset

from evokernel.cli import main
from evokernel.evolve.config import config_from_dict
from evokernel.evolve.session import create_session


def _make_run(path, iterations):
    cfg = config_from_dict(
        {"islands": {"count": 2}, "budget": {"iterations": iterations}},
    )
    session = create_session(path, FakeProblem(), cfg)
    try:
        return session.execute(mutators=mset(), stream=io.StringIO(), live=False)
    finally:
        session.close()


def test_status_json_ends_stdout(tmp_path, capsys):
    out = _make_run(tmp_path / "run", 6)
    assert main(["status", str(tmp_path / "run"), "--json"]) == 0
    stdout = capsys.readouterr().out
    data = json.loads(stdout.strip().splitlines()[-1])
    assert data["evaluated"] == out.summary.evaluated >= 2
    assert data["iterations_done"] == data["iterations_target"] == 6
    assert data["best"]["id"] == out.summary.best["id"]
    assert data["best"]["fitness"] > 0
    assert data["valid"] + data["failed"] == data["evaluated"]
    assert len(data["islands"]) == 2 and all(n >= 1 for n in data["islands"])
    assert data["tokens"] == 0 and data["cost_usd"] == 0
    assert data["finished"] and not data["running"]
    assert "finished (iterations)" in stdout
    assert len(data["dispatch"]) == 3


def test_status_of_a_run_that_can_continue(tmp_path, capsys):
    from evokernel.evolve.database import Database

    _make_run(tmp_path / "run", 3)
    db = Database(tmp_path / "run" / "programs.sqlite")
    db.commit(meta={"iterations_target": 9, "state": {"finished": False, "stop_reason": ""}})
    db.close()
    assert main(["status", str(tmp_path / "run"), "--json"]) == 0
    stdout = capsys.readouterr().out
    data = json.loads(stdout.strip().splitlines()[-1])
    assert data["iterations_done"] == 3 and data["iterations_target"] == 9
    assert "--resume" in stdout


def test_status_of_a_missing_run_is_a_one_line_error(tmp_path, capsys):
    assert main(["status", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err == f"error: no such run directory: {tmp_path / 'nothing'}\n"
    (tmp_path / "empty").mkdir()
    assert main(["status", str(tmp_path / "empty")]) == 2
    assert "holds no run to report on" in capsys.readouterr().err
