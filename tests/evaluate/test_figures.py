"""Judgements that need timings: the profiler's kernel list (parsed from a chrome trace), the
host/event cross-check, and the per-scenario figures and flags."""

from __future__ import annotations

import json
from pathlib import Path

from evokernel.evaluate.figures import profile_problems, scenario_result, timer_problems
from evokernel.evaluate.protocol import GpuEvent, Series
from evokernel.evaluate.worker.profile import gpu_events
from evokernel.reasons import reason_code
from evokernel.tasks import get_task

KERNELS = ["_decode_split", "_decode_combine"]


def trace(tmp_path: Path, events: list[dict]) -> list[GpuEvent]:
    path = tmp_path / "trace.json"
    cpu = {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": 1, "tid": 1, "ts": 1.0}
    path.write_text(json.dumps({"traceEvents": [cpu, *events]}))
    return gpu_events(str(path))


def kernel(name: str, ts: float, dur: float, stream: int, cat: str = "kernel") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur}


def test_profile_checks(tmp_path: Path) -> None:
    marker = kernel("void at::native::vectorized_elementwise_kernel<4>", 10, 2, 7)
    own = [kernel("_decode_split", 20, 8, 7), kernel("_decode_combine", 30, 2, 7)]
    assert profile_problems(trace(tmp_path, [marker, *own]), KERNELS, "s")[0] == []
    side = kernel("_decode_split", 40, 8, 13)
    lines, listing = profile_problems(trace(tmp_path, [marker, *own, side]), KERNELS, "s")
    assert [reason_code(x) for x in lines] == ["side-stream"]
    assert len(listing) == 3
    stock = kernel("void at::native::flash_fwd_kernel", 20, 30, 7)
    lines, _ = profile_problems(trace(tmp_path, [marker, *own, stock]), KERNELS, "s")
    assert [reason_code(x) for x in lines] == ["kernels-missing"] and "%" in lines[0]
    lines, _ = profile_problems(trace(tmp_path, [marker, stock]), KERNELS, "s")
    assert "none of the candidate's kernels" in lines[0]
    assert profile_problems([], KERNELS, "s") == ([], [])  # nothing recorded: not blamed


def series(event: float, tail: float, xhost: float | list[float], n: int = 20) -> Series:
    """`xhost`: one host time for every cross-check call, or one per batch of 8 calls."""
    per_batch = xhost if isinstance(xhost, list) else [xhost] * 3
    return Series(
        event_us=[event] * n,
        tail_us=[tail] * n,
        enqueue_us=[5.0] * n,
        xhost_us=[h for h in per_batch for _ in range(8)],
        xevent_us=[event + 10.0] * 8 * len(per_batch),
        xbatch=[b for b in range(len(per_batch)) for _ in range(8)],
    )


def test_timer_cross_check() -> None:
    base = series(20.0, 4.0, 40.0)
    honest = {"candidate": series(10.0, 5.0, 30.0), "baseline:b": base}
    assert timer_problems(honest, "s") == []
    tail = {"candidate": series(2.0, 150.0, 30.0), "baseline:b": base}
    assert [reason_code(x) for x in timer_problems(tail, "s")] == ["timer-mismatch"]
    host = {"candidate": series(2.0, 5.0, 300.0), "baseline:b": base}
    assert [reason_code(x) for x in timer_problems(host, "s")] == ["timer-mismatch"]


def test_interference_in_one_cross_check_batch_is_not_a_timer_mismatch() -> None:
    """Work that escapes the events shows in every batch; a moment of interference (another
    process on the GPU, the host thread descheduled) in one batch only is no evidence."""
    base = series(20.0, 4.0, 40.0)
    burst = {"candidate": series(10.0, 5.0, [30.0, 900.0, 30.0]), "baseline:b": base}
    assert timer_problems(burst, "s") == []
    always = {"candidate": series(10.0, 5.0, [300.0, 900.0, 250.0]), "baseline:b": base}
    (line,) = timer_problems(always, "s")
    assert reason_code(line) == "timer-mismatch"
    assert "by 230.0 us" in line  # the batch closest to passing is the one reported


def test_a_spell_of_tail_interference_is_not_a_timer_mismatch() -> None:
    """The tail (device busy after the launching stream finished) must exceed the baselines'
    in every third of the timed rounds: escaping work does so on every call, a spell of
    interference covers a part (even most calls' median, as once on an H200 under a sweep)."""
    base = series(8.0, 8.0, 40.0, n=30)
    spell = series(13.0, 8.0, 30.0, n=30)
    spell.tail_us[:] = [8.0] * 10 + [40.0] * 20  # two thirds busy: median 40 us
    assert timer_problems({"candidate": spell, "baseline:b": base}, "s") == []
    escaping = series(13.0, 8.0, 30.0, n=30)
    escaping.tail_us[:] = [30.0, 30.0, 8.0] * 10  # two of three calls, in every third
    (line,) = timer_problems({"candidate": escaping, "baseline:b": base}, "s")
    assert reason_code(line) == "timer-mismatch" and "busy 30.0 us" in line
    assert "per third of the rounds, candidate/baselines: 30.0/8.0, 30.0/8.0, 30.0/8.0" in line
    short = series(13.0, 40.0, 30.0, n=2)  # fewer calls than parts: the parts shrink
    assert timer_problems({"candidate": short, "baseline:b": series(8.0, 8.0, 40.0, n=2)}, "s")


def test_scenario_figures_and_flags() -> None:
    task = get_task("decode_linear")
    scenario = task.scenarios("cuda")[0]
    dtype = task.dtypes["cuda"][0]
    nbytes = task.bytes_moved(scenario, dtype)
    roof_us = nbytes / (3000.0 * 1e3)  # at 3000 GB/s
    runs = {
        "candidate": series(2 * roof_us, 4, 30),
        "baseline:F.linear": series(4 * roof_us, 4, 30),
    }
    s = scenario_result(task, scenario, dtype, runs, "cuda", 3000.0, {"F.linear": 4 * roof_us})
    assert s.baseline == "F.linear" and abs(s.speedup - 2.0) < 1e-9 and s.win
    assert abs(s.pct_roofline - 50.0) < 1e-6 and s.flags == []
    fast = {
        "candidate": series(0.5 * roof_us, 4, 30),
        "baseline:F.linear": runs["baseline:F.linear"],
    }
    s = scenario_result(task, scenario, dtype, fast, "cuda", 3000.0, {"F.linear": roof_us})
    assert s.flags == ["beyond-roofline", "baseline-slowdown"] and not s.win
    cpu = scenario_result(task, scenario, dtype, runs, "cpu", 0.0, {})
    assert cpu.speedup is None and cpu.roofline_us == 0.0 and not cpu.win
