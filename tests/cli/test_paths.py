"""Paths checked before any work, through the CLI: an output path that is a device, a FIFO, a
directory or a link leading into /proc is refused in one line and left as it was (never
replaced by an atomic rename); an input given as a file is read only when it is a regular file
(a FIFO is refused, never opened: opening one for reading blocks)."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_checks import refused

from evokernel.cli import main


def _state(path: Path) -> tuple[int, int, int]:
    info = os.lstat(path)
    return info.st_ino, info.st_mode, info.st_rdev


def _targets(tmp_path: Path) -> dict[str, Path]:
    """Paths that must never be written as files: a device, a FIFO, a directory, links into
    /proc and /dev (one through a linked directory)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "adir").mkdir()
    (tmp_path / "to-stdout").symlink_to("/proc/self/fd/1")
    (tmp_path / "self").symlink_to("/proc/self")
    (tmp_path / "to-null").symlink_to("/dev/null")
    return {
        "device": Path("/dev/full"),
        "fifo": fifo,
        "directory": tmp_path / "adir",
        "link into /proc": tmp_path / "to-stdout",
        "link through a linked /proc directory": tmp_path / "self" / "fd" / "1",
        "link into /dev": tmp_path / "to-null",
    }


MESSAGES = {
    "device": "lies under /dev",
    "fifo": "is a FIFO, not a regular file: it is left as it is",
    "directory": "is a directory, not a regular file",
    "link into /proc": "leads into /proc",
    "link through a linked /proc directory": "leads into /proc",
    "link into /dev": "leads into /dev",
}


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "programs.sqlite").touch()  # enough to be taken for a run: the refusal comes first
    return run


def test_report_out_refuses_what_is_not_a_regular_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_dir(tmp_path)
    for name, target in _targets(tmp_path).items():
        before = _state(target)
        line = refused(capsys, ["report", str(run), "--out", str(target)])
        assert line.startswith(f"error: --out: {target}") and MESSAGES[name] in line, line
        assert _state(target) == before, name  # left exactly as it was
    assert not (run / "report.html").exists()


def test_report_default_page_and_png_targets_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_dir(tmp_path)
    os.mkfifo(run / "report.html")
    line = refused(capsys, ["report", str(run)])
    assert "the page (default --out)" in line and "is a FIFO" in line
    bench = tmp_path / "bench.json"
    bench.write_text("{}")  # never read: the PNG target is refused first
    pngs = tmp_path / "pngs"
    pngs.mkdir()
    os.mkfifo(pngs / "decode_latency.png")
    out = tmp_path / "page.html"
    line = refused(capsys, ["report", str(bench), "--out", str(out), "--png", str(pngs)])
    assert line == f"error: --png: {pngs / 'decode_latency.png'} is a FIFO, not a regular " + (
        "file: it is left as it is; choose a file path"
    )
    assert stat.S_ISFIFO(os.lstat(pngs / "decode_latency.png").st_mode) and not out.exists()


def test_bench_decode_out_is_checked_before_measuring(
    tiny_fp32: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["bench", "decode", "--model", str(tiny_fp32), "--device", "cpu", "--steps", "2"]
    os.mkfifo(tmp_path / "b.csv")
    cases = {
        str(tmp_path / "fifo.json"): "is a FIFO",
        str(tmp_path / "b.json"): "--out (its CSV): " + str(tmp_path / "b.csv") + " is a FIFO",
        "/proc/self/fd/1.json": "lies under /proc",
        str(tmp_path / "nowhere" / "x" / "r.json"): None,  # creatable: passes the check
    }
    os.mkfifo(tmp_path / "fifo.json")
    for out, message in cases.items():
        if message is None:
            continue
        line = refused(capsys, [*base, "--out", out])
        assert message in line, line
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo.json").st_mode)


def test_tune_refuses_a_pack_json_that_is_not_a_regular_file(
    tiny_fp32: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pack = tmp_path / "pack"
    pack.mkdir()
    os.mkfifo(pack / "pack.json")
    line = refused(capsys, ["tune", "--model", str(tiny_fp32), "--out", str(pack),
                            "--device", "cpu", "--iterations", "0"])  # fmt: skip
    assert line == f"error: --out: {pack / 'pack.json'} is a FIFO, not a regular file: it is " + (
        "left as it is; choose a file path"
    )
    assert sorted(p.name for p in pack.iterdir()) == ["pack.json"]  # no search started


def _within(seconds: float, fn: Callable[[], None], fifo: Path) -> None:
    """Run `fn` in a thread; fail (and unblock a reader stuck on `fifo`) if it takes longer."""
    done = threading.Event()

    def target() -> None:
        fn()
        done.set()

    threading.Thread(target=target, daemon=True).start()
    if not done.wait(seconds):
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # the stuck reader gets EOF
        os.close(fd)
        pytest.fail(f"hung on the FIFO {fifo}")


def test_inputs_that_are_fifos_are_refused_without_opening_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"kind": "evokernel-bench-decode"}))
    lines: list[str] = []
    for argv in (
        ["report", str(fifo)],
        ["report", str(other), str(fifo)],
        ["bench", "decode", "--compare", str(other), str(fifo)],
        ["bench", "decode", "--compare", str(fifo), str(other)],
    ):
        _within(60, lambda argv=argv: lines.append(refused(capsys, argv)), fifo)
    assert all(f"{fifo} is a FIFO, not a regular file" in line for line in lines), lines


def test_report_names_what_a_directory_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    empty = tmp_path / "empty"
    empty.mkdir()
    line = refused(capsys, ["report", str(empty)])
    assert "holds no run (no programs.sqlite)" in line and "resume" not in line
    pack = tmp_path / "pack"
    (pack / "runs" / "decode_layer").mkdir(parents=True)
    (pack / "runs" / "decode_layer" / "programs.sqlite").touch()
    (pack / "pack.json").write_text("{}")
    line = refused(capsys, ["report", str(pack)])
    assert f"{pack} is a kernel pack, not a run" in line
    assert str(pack / "runs" / "decode_layer") in line
    assert main(["report", str(tmp_path / "missing")]) == 2


def test_a_link_to_a_regular_file_is_written_through(tmp_path: Path) -> None:
    from evokernel.files import output_file

    real = tmp_path / "real.html"
    real.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    assert output_file(link) == real
    from evokernel.report.page import write_page

    write_page(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_links_that_loop_or_lead_under_a_file_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_dir(tmp_path)
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    line = refused(capsys, ["report", str(run), "--out", str(tmp_path / "a")])
    assert "too many levels of symbolic links" in line
    (tmp_path / "file").write_text("x")
    line = refused(capsys, ["report", str(run), "--out", str(tmp_path / "file" / "page.html")])
    assert line.endswith("page.html lies under a file, not a directory")
