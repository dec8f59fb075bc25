"""run_isolated: the sandbox for any function in any file (real processes throughout)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from eval_helpers import ISOLATED, descendants, marked_processes

from evokernel.errors import EvokernelError
from evokernel.evaluate import run_isolated
from evokernel.reasons import reason_code

FUNCTIONS = ISOLATED / "functions.py"


def test_returns_json_value() -> None:
    out = run_isolated(FUNCTIONS, "evaluate", ["prog.py"], timeout_s=30)
    assert out.ok, out.reason
    assert out.value["combined_score"] == 1.5 and out.value["path"] == "prog.py"
    assert out.value["nan"] != out.value["nan"]  # NaN survives the channel
    assert run_isolated(FUNCTIONS, "add", [2], {"b": 3}).value == 5


def test_exception_is_a_reason() -> None:
    out = run_isolated(FUNCTIONS, "fails")
    assert not out.ok and reason_code(out.reason or "") == "exception"
    assert "ValueError: no good" in (out.reason or "")
    assert "fails" in out.traceback


def test_timeout_kills_the_whole_tree() -> None:
    marker = f"evokernel-mark-{uuid.uuid4().hex[:12]}"
    start = time.monotonic()
    out = run_isolated(FUNCTIONS, "hangs_with_grandchild", [marker], timeout_s=3)
    assert reason_code(out.reason or "") == "timeout"
    assert time.monotonic() - start < 15
    assert marked_processes(marker) == []
    assert descendants() == []


def test_segfault_is_a_crash_with_the_signal() -> None:
    out = run_isolated(FUNCTIONS, "segfaults")
    assert reason_code(out.reason or "") == "crashed"
    assert "SIGSEGV" in (out.reason or "")


def test_memory_budget() -> None:
    out = run_isolated(FUNCTIONS, "hogs_memory", memory_mb=400, timeout_s=60)
    assert reason_code(out.reason or "") == "memory-budget", out.reason


def test_stdout_is_never_the_result() -> None:
    out = run_isolated(FUNCTIONS, "lies_on_stdout")
    assert not out.ok and reason_code(out.reason or "") == "no-result"
    assert "1000.0" in out.stdout_tail


def test_unsendable_result_and_sys_exit() -> None:
    out = run_isolated(FUNCTIONS, "not_json")
    assert not out.ok and "not JSON" in (out.reason or "")
    out = run_isolated(FUNCTIONS, "exits")
    assert not out.ok and "SystemExit" in (out.reason or "")


def test_bad_arguments_raise(tmp_path: Path) -> None:
    with pytest.raises(EvokernelError):
        run_isolated(tmp_path / "missing.py")
    with pytest.raises(EvokernelError):
        run_isolated(FUNCTIONS, timeout_s=0)


@pytest.mark.parametrize("interrupt", ["cgroup", "probe"])
def test_the_isolation_probe_leaves_no_scratch_directory(interrupt, tmp_path, monkeypatch) -> None:
    """An interrupt while the probe sets up (the cgroup) or runs leaves no evokernel-probe-*."""
    import subprocess
    import tempfile

    from evokernel.evaluate.process import cgroup, policy

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(policy, "_STATUS", [])  # probe afresh, and forget this one after

    def stop(*_args, **_kwargs):
        raise KeyboardInterrupt

    target = (cgroup.Cgroup, "create") if interrupt == "cgroup" else (subprocess, "run")
    monkeypatch.setattr(*target, stop)
    with pytest.raises(KeyboardInterrupt):
        policy.isolation_status()
    assert not list(tmp_path.glob("evokernel-probe-*"))
