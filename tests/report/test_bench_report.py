"""`evokernel report` on `bench decode` result files: checks on the input, the page, the PNG
plots (and the one-line error without matplotlib), and the page in a real browser."""

from __future__ import annotations

import re
import sys

import pytest
from bench_files import bench_doc, write

from evokernel.cli import main
from evokernel.errors import EvokernelError
from evokernel.report.bench_data import floor_tok_s, load_bench
from evokernel.report.bench_page import write_bench_report

SYSTEMS = ["evokernel", "gptfast", "hf_eager", "hf_compile"]


@pytest.fixture
def h200(tmp_path):
    a = write(tmp_path / "h200.json", bench_doc(SYSTEMS, failed=("hf_compile", 4096)))
    b = write(tmp_path / "h200_again.json", bench_doc(["evokernel"], copy_gbps=4240.0))
    return a, b


def _cli(capsys, *args) -> tuple[int, str, str]:
    """`evokernel report ARGS` in this process: (exit code, stdout, stderr)."""
    code = main(["report", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_series_floor_and_failed_rows(h200):
    data = load_bench(list(h200))
    # A system in two files is told apart by file name; the others keep their names.
    assert data.series == [
        "evokernel (h200)",
        "gptfast",
        "hf_eager",
        "hf_compile",
        "evokernel (h200_again)",
    ]
    failed = [r for r in data.rows if r.error]
    assert [(r.system, r.position) for r in failed] == [("hf_compile", 4096)]
    assert failed[0].get("tok_s") is None
    floor = dict(floor_tok_s(data))
    assert sorted(floor) == [1, 128, 512, 1024, 4096]
    # The floor comes from the first file: 1000 / floor_ms tokens per second at batch 1.
    assert floor[1] == pytest.approx(1000 / data.of("gptfast")[0].get("floor_ms"))
    assert floor[1] > floor[4096]


def test_page_holds_every_system_the_floor_and_the_errors_escaped(h200, tmp_path):
    out = write_bench_report(list(h200))
    assert out == h200[0].with_suffix(".html")
    html = out.read_text()
    for name in ("evokernel (h200)", "gptfast", "hf_eager", "hf_compile", "bandwidth floor"):
        assert name in html
    assert "floor (100%)" in html and "NVIDIA H200" in html
    assert "<b>bold</b>" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html
    assert "NaN" not in html and ">nan<" not in html.lower()


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"kind": "something-else"}, "not a bench decode result file (kind is 'something-else'"),
        ({**bench_doc(["evokernel"]), "schema": 2}, "schema is 2, expected 1"),
        ({**bench_doc(["evokernel"]), "systems": ["evokernel", "vllm"]}, "no row for vllm"),
    ],
)
def test_files_that_are_not_bench_results_are_refused_in_one_line(tmp_path, capsys, doc, message):
    bad = write(tmp_path / "bad.json", doc)
    with pytest.raises(EvokernelError, match=re.escape(message)):
        load_bench([bad])
    code, _, err = _cli(capsys, bad)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ")


def test_mixed_gpus_are_refused(tmp_path, h200, capsys):
    h100 = write(tmp_path / "h100.json", bench_doc(["evokernel"], gpu="NVIDIA H100 80GB HBM3"))
    code, _, err = _cli(capsys, h200[0], h100)
    assert code == 2 and err.count("\n") == 1
    assert "NVIDIA H100 80GB HBM3" in err and "one GPU" in err
    cpu = write(tmp_path / "cpu.json", bench_doc(["evokernel"], device="cpu"))
    with pytest.raises(EvokernelError, match="device"):
        load_bench([h200[0], cpu])
    assert not h200[0].with_suffix(".html").exists()


def test_cpu_file_says_it_makes_no_speed_claim(tmp_path):
    cpu = write(
        tmp_path / "cpu.json",
        bench_doc(["evokernel"], device="cpu", label="cpu-smoke (tiny preset, no speed claim)"),
    )
    html = write_bench_report([cpu], tmp_path / "page.html").read_text()
    assert "cpu-smoke (tiny preset, no speed claim)" in html and "not a speed claim" in html


def test_png_plots_through_the_cli(h200, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "png"
    code, stdout, err = _cli(capsys, *h200, "--out", tmp_path / "b.html", "--png", out)
    assert code == 0, err
    names = sorted(p.name for p in out.iterdir())
    assert names == ["decode_latency.png", "decode_pct_floor.png", "decode_tok_s.png"]
    for p in out.iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
    assert (tmp_path / "b.html").exists() and f"wrote {out / 'decode_tok_s.png'}" in stdout


def test_png_without_matplotlib_is_one_clear_line(h200, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an install without it sees
    code, _, err = _cli(capsys, h200[0], "--png", tmp_path / "png")
    assert code == 2
    assert err == (
        "error: --png needs matplotlib, which is not installed: pip install 'evokernel[report]'\n"
    )


def test_bench_page_in_the_browser(h200, open_page, tmp_path):
    out = write_bench_report(list(h200), tmp_path / "bench.html")
    page, log = open_page(out)
    assert log.errors == [] and log.requests == [out.resolve().as_uri()]
    assert page.locator("figure.chart svg").count() == 3
    assert "CUDA out of memory </td><b>bold</b>" in page.locator("#figures").inner_text()
    page.screenshot(path=str(tmp_path / "bench.png"), full_page=True)
    assert (tmp_path / "bench.png").stat().st_size > 20_000


def test_real_cpu_smoke_result_renders_with_its_label(smoke_bench, open_page, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    code, _, err = _cli(capsys, smoke_bench, "--png", tmp_path / "png")
    assert code == 0, err
    page_path = smoke_bench.with_suffix(".html")
    html = page_path.read_text()
    assert "cpu-smoke" in html and "not a speed claim" in html
    assert len(list((tmp_path / "png").glob("decode_*.png"))) == 3
    page, log = open_page(page_path)
    assert log.errors == [] and log.requests == [page_path.resolve().as_uri()]
    series = page.locator("#throughput figcaption").first.inner_text()
    assert "evokernel" in series and "hf_eager" in series and "bandwidth floor" in series


def _edited(edit):
    doc = bench_doc(["evokernel"])
    edit(doc)
    return doc


def _row(key, value):
    return lambda d: d["results"][1].__setitem__(key, value)


IMPOSSIBLE = {
    "boolean tok/s": (_row("tok_s", True), "results[1].tok_s is True, not a finite number"),
    "negative latency": (_row("ms_p50", -0.2), "results[1].ms_p50 is -0.2; it must be > 0"),
    "zero tok/s": (_row("tok_s", 0), "results[1].tok_s is 0; it must be > 0"),
    "negative floor share": (_row("pct_floor", -3.0), "results[1].pct_floor is -3.0"),
    "string figure": (_row("ttft_ms", "7"), "results[1].ttft_ms is '7', not a finite number"),
    "boolean steps": (_row("steps", True), "results[1].steps is True, not a positive integer"),
    "fractional outliers": (_row("outliers", 1.5), "results[1].outliers is 1.5, not an integer"),
    "percentiles out of order": (_row("ms_p99", 0.001), "P95"),
    "boolean position": (_row("position", True), "results[1] names no system and position"),
    "numeric error": (_row("error", 3), "results[1].error is 3, not text or null"),
    "boolean weight bytes": (
        lambda d: d["model"].__setitem__("weight_bytes", True),
        "model.weight_bytes is not a positive integer",
    ),
    "negative copy bandwidth": (
        lambda d: d["env"].__setitem__("copy_gbps", -1.0),
        "env.copy_gbps is -1.0, not a positive number",
    ),
    "position zero": (
        lambda d: d["options"].__setitem__("positions", [0, 1]),
        "options.positions is not an array of integers >= 1",
    ),
}


@pytest.mark.parametrize("case", sorted(IMPOSSIBLE))
def test_impossible_figures_are_refused_by_report_and_compare(tmp_path, capsys, case):
    edit, message = IMPOSSIBLE[case]
    good = write(tmp_path / "good.json", bench_doc(["evokernel"]))
    bad = write(tmp_path / "bad.json", _edited(edit))
    for argv in (["report", str(bad)], ["bench", "decode", "--compare", str(good), str(bad)]):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 2 and out == "", (argv, out)
        assert err.startswith(f"error: {bad}: not a bench decode result file (") and (
            message in err and err.count("\n") == 1
        ), err
    assert not bad.with_suffix(".html").exists()
    # The unedited file passes both.
    assert main(["bench", "decode", "--compare", str(good), str(good)]) == 0
    capsys.readouterr()
