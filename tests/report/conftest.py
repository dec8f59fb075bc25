"""Fixtures of the report tests: the run directories (runs.py), and one headless Chromium for
the whole session, driven by Playwright.

The browser is Debian's `chromium` (`scripts/setup.sh test` installs it where apt and root are
available) or the one named by EVOKERNEL_CHROMIUM. Browser tests skip, saying why, only where
no browser or no Playwright is present. Every page opened records console errors, uncaught
exceptions, dialogs (alert/confirm) and every request it makes.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from runs import Runs

CHROMIUM_CANDIDATES = (
    "/usr/lib/chromium/chromium",  # Debian's binary (the /usr/bin/chromium wrapper adds flags)
    "chromium",
    "chromium-browser",
    "google-chrome",
)


def find_chromium() -> str | None:
    named = os.environ.get("EVOKERNEL_CHROMIUM")
    if named:
        return named
    for candidate in CHROMIUM_CANDIDATES:
        path = candidate if os.path.isabs(candidate) else shutil.which(candidate)
        if path and os.access(path, os.X_OK):
            return path
    return None


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("report-runs"))


@pytest.fixture(scope="session")
def smoke_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `bench decode` result: the CPU smoke suite on a `tiny` random checkpoint, our
    engine and transformers eager (the cheapest two systems)."""
    import contextlib
    import io

    from evokernel.cli import main

    root = tmp_path_factory.mktemp("smoke-bench")
    out = root / "smoke.json"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["model", "random", str(root / "tiny"), "--preset", "tiny"]) == 0
        argv = ["bench", "decode", "--model", str(root / "tiny"), "--device", "cpu"]
        assert main([*argv, "--baselines", "evokernel,hf_eager", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    exe = find_chromium()
    if exe is None:
        pytest.skip(
            "no Chromium found: `scripts/setup.sh test` installs Debian's chromium where apt "
            "and root are available, or set EVOKERNEL_CHROMIUM to a Chromium binary"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed: pip install -e '.[test]'")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True)
        try:
            yield b
        finally:
            b.close()


@dataclass
class PageLog:
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


@pytest.fixture
def open_page(browser: Any) -> Iterator[Callable[..., tuple[Any, PageLog]]]:
    """open_page(path, fragment="") -> (page, log), the page loaded from the file."""
    contexts = []

    def opener(path: Path, fragment: str = "") -> tuple[Any, PageLog]:
        ctx = browser.new_context(viewport={"width": 1400, "height": 900})
        contexts.append(ctx)
        page = ctx.new_page()
        log = PageLog()
        page.on("console", lambda m: log.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: log.errors.append(f"uncaught: {e}"))
        page.on("request", lambda r: log.requests.append(r.url))

        def dialog(d: Any) -> None:
            log.dialogs.append(d.message)
            d.dismiss()

        page.on("dialog", dialog)
        page.goto(Path(path).resolve().as_uri() + fragment)
        page.wait_for_load_state("load")
        return page, log

    yield opener
    for ctx in contexts:
        ctx.close()
