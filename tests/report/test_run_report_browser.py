"""Run reports opened in headless Chromium: they load without console errors or requests,
draw exactly the run's programs, show a program's diff on a click, keep hostile candidate text
as text, and stay usable at thousands of programs."""

from __future__ import annotations

import difflib
import sqlite3
import time

import pytest
from runs import db_ids

from evokernel.report.run_page import write_run_report

KINDS = ["generic", "failed", "empty", "resumed", "timed", "broken"]

DATA = "JSON.parse(document.getElementById('report-data').textContent)"
TREE_IDS = (
    f"(() => {{ const d = {DATA}; return Array.from(document.querySelectorAll('#tree-svg "
    "[data-i]')).map(e => d.nodes[+e.getAttribute('data-i')].id); })()"
)


def _only_the_page_loaded(log, report) -> None:
    assert log.errors == [], log.errors
    assert log.dialogs == [], log.dialogs
    assert log.requests == [report.resolve().as_uri()], log.requests


@pytest.mark.parametrize("kind", KINDS)
def test_report_loads_cleanly_and_draws_every_program(kind, runs, open_page, tmp_path):
    run = getattr(runs, kind)
    report = write_run_report(run, tmp_path / f"{kind}.html")
    page, log = open_page(report)
    _only_the_page_loaded(log, report)
    drawn = page.evaluate(TREE_IDS)
    assert sorted(drawn) == sorted(db_ids(run)), "the tree must hold exactly the run's programs"
    assert len(drawn) == len(set(drawn))
    # The page opens on the best program (or the first) with its details shown.
    assert page.locator("#details h3").first.inner_text().strip() != ""
    shot = tmp_path / f"{kind}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000


def _diffed_program(run) -> tuple[str, str]:
    """(id, an added line) of the first evaluated child whose code differs from its parent."""
    conn = sqlite3.connect(run / "programs.sqlite")
    rows = {r[0]: r for r in conn.execute("SELECT id, parent_ids, code, kind FROM programs")}
    conn.close()
    for pid, parents, code, kind in rows.values():
        first = parents.strip('[]"').split('"')[0]
        if kind == "offline:knob" and first in rows and rows[first][2] != code:
            diff = difflib.unified_diff(rows[first][2].splitlines(), code.splitlines(), n=0)
            added = [ln for ln in diff if ln.startswith("+") and not ln.startswith("+++")]
            return pid, added[0]
    raise AssertionError("no program with a diff")


def test_click_on_a_program_shows_its_figures_and_diff(runs, open_page, tmp_path):
    report = write_run_report(runs.timed, tmp_path / "timed.html")
    page, log = open_page(report)
    pid, added = _diffed_program(runs.timed)
    index = db_ids(runs.timed).index(pid)
    page.locator(f'#tree-svg [data-i="{index}"]').click()
    assert page.locator("#details h3").first.inner_text().startswith(pid)
    assert page.locator("#diff-title").inner_text().startswith("Diff against")
    assert added in page.locator("#diff").inner_text()
    assert page.locator("#details table").count() >= 2  # regimes, scenarios, phases
    assert page.evaluate("location.hash") == f"#program={pid}"
    # Its parent is one click away.
    page.locator("#details dd button.link").first.click()
    assert not page.locator("#details h3").first.inner_text().startswith(pid)
    page.screenshot(path=str(tmp_path / "clicked.png"))
    assert log.errors == []


def test_hostile_candidate_text_stays_text(runs, open_page, tmp_path):
    report = write_run_report(runs.timed, tmp_path / "timed.html")
    conn = sqlite3.connect(runs.timed / "programs.sqlite")
    pid = conn.execute(
        "SELECT id FROM programs WHERE kind = 'llm:diff' AND status = 'ok' LIMIT 1"
    ).fetchone()[0]
    conn.close()
    page, log = open_page(report, f"#program={pid}")
    details = page.locator("#details").inner_text()
    assert "</script><script>alert(1)</script>" in details
    assert (
        '<img src="https://evil.example/x.png" onerror="alert(2)">'
        in page.locator("#diff").inner_text()
    )
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("document.scripts.length") == 2  # the data block and the page script
    winner = page.locator("#winner").inner_text()
    assert "not bold" not in winner or "<b>" in winner
    _only_the_page_loaded(log, report)


def test_broken_run_renders_its_damage_as_words(runs, open_page, tmp_path):
    run = runs.broken
    report = write_run_report(run, tmp_path / "broken.html")
    page, log = open_page(report)
    header = page.locator("header").inner_text()
    assert "no longer holds" in header and runs.evicted in header
    assert "non-finite" in header
    assert page.locator("#tree-svg .stub").count() == 1
    orphans = page.evaluate(f"{DATA}.nodes.filter(n => n.evicted.length).map(n => n.id)")
    assert orphans
    page.evaluate(
        f"document.querySelector('#tree-svg [data-i=\"' + {DATA}.nodes.findIndex("
        f"n => n.id === '{orphans[0]}') + '\"]').dispatchEvent(new MouseEvent('click', "
        "{bubbles: true}))"
    )
    assert "no longer in the database" in page.locator("#details").inner_text()
    assert log.errors == []


def test_thousands_of_programs_stay_usable(runs, open_page, tmp_path):
    run = runs.large
    start = time.monotonic()
    report = write_run_report(run, tmp_path / "large.html")
    written = time.monotonic() - start
    assert report.stat().st_size < 12_000_000
    start = time.monotonic()
    page, log = open_page(report)
    loaded = time.monotonic() - start
    assert page.evaluate("document.querySelectorAll('#tree-svg [data-i]').length") == len(
        db_ids(run)
    )
    # The DOM grows by one element per program, not by one per edge or per label.
    elements = page.evaluate("document.getElementsByTagName('*').length")
    assert elements < 1.3 * len(db_ids(run)) + 3000
    start = time.monotonic()
    page.locator("#find").fill("p02500")
    page.locator("#find").press("Enter")
    assert page.locator("#details h3").first.inner_text().startswith("p02500")
    clicked = time.monotonic() - start
    page.locator("#zoom-fit").click()
    page.screenshot(path=str(tmp_path / "large.png"))
    assert log.errors == []
    assert written < 60 and loaded < 30 and clicked < 5, (written, loaded, clicked)
