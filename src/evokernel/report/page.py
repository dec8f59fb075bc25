"""The skeleton every report page shares: one HTML document with its stylesheet, script and
data inlined, under a Content-Security-Policy that forbids loading anything.

The policy (`default-src 'none'`) makes the browser refuse every fetch, image, font or frame
from anywhere, and allows only the page's own script (by a nonce), so even text that escaped
into markup could neither load nor run anything. Links (`href`) to files beside the page stay
usable: following a link is navigation, which the policy does not govern.
"""

from __future__ import annotations

import os
import secrets
from importlib import resources
from pathlib import Path

from evokernel.evolve.rundir import atomic_write
from evokernel.files import output_file
from evokernel.report.svg import esc, script_json


def asset(name: str) -> str:
    return resources.files("evokernel.report").joinpath("assets", name).read_text()


def write_page(path: Path, text: str) -> Path:
    """Write atomically, readable by others (a page is meant to be shared), and only over a
    regular file: a device, FIFO or directory at `path`, or a link leading under /proc, /sys
    or /dev, is refused in one line and left as it is (evokernel.files.output_file; the CLI
    checks first, this holds for every caller)."""
    target = output_file(path)  # a link to a regular file: that file is written
    atomic_write(target, text)
    os.chmod(target, 0o644)
    return path


def document(
    title: str,
    header: str,
    nav: list[tuple[str, str]],
    body: str,
    *,
    script: str = "",
    data: object = None,
    extra_css: str = "",
) -> str:
    """The page. `header` and `body` are markup built with `esc`; `nav` is (anchor, label)."""
    nonce = secrets.token_urlsafe(16)
    csp = (
        "default-src 'none'; style-src 'unsafe-inline'; "
        f"script-src 'nonce-{nonce}'; form-action 'none'; base-uri 'none'"
    )
    links = "".join(f'<a href="#{esc(anchor)}">{esc(label)}</a>' for anchor, label in nav)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>{esc(title)}</title>",
        f"<style>{asset('report.css')}{extra_css}</style>",
        "</head><body>",
        f"<header>{header}</header>",
        f"<nav>{links}</nav>" if nav else "",
        f"<main>{body}</main>",
    ]
    if data is not None:
        parts.append(
            f'<script type="application/json" id="report-data">{script_json(data)}</script>'
        )
    if script:
        parts.append(f'<script nonce="{nonce}">{script}</script>')
    parts.append("</body></html>\n")
    return "".join(parts)


def cards(items: list[tuple[str, str]]) -> str:
    """Headline figures: (value markup, label)."""
    inner = "".join(
        f"<div class=card><b>{value}</b><span>{esc(label)}</span></div>" for value, label in items
    )
    return f'<div class="cards">{inner}</div>'


def table(head: list[str], rows: list[list[str]], numeric: set[int] | None = None) -> str:
    """A table of already-escaped cells; columns in `numeric` align right."""
    numeric = numeric or set()
    cls = lambda j: ' class="num"' if j in numeric else ""
    th = "".join(f"<th{cls(j)}>{esc(h)}</th>" for j, h in enumerate(head))
    body = "".join(
        "<tr>" + "".join(f"<td{cls(j)}>{c}</td>" for j, c in enumerate(r)) + "</tr>" for r in rows
    )
    return f"<table><tr>{th}</tr>{body}</table>"


def diff_block(text: str) -> str:
    """A unified diff as markup, one escaped span per line."""
    out = []
    for line in text.split("\n"):
        if line.startswith(("+++", "---")):
            cls = "meta"
        elif line.startswith("+"):
            cls = "add"
        elif line.startswith("-"):
            cls = "del"
        elif line.startswith("@@"):
            cls = "hunk"
        else:
            cls = ""
        attr = f' class="{cls}"' if cls else ""
        out.append(f"<span{attr}>{esc(line)}</span>")
    return f'<pre class="diff">{"".join(out)}</pre>'


def section(anchor: str, title: str, inner: str) -> str:
    return f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>{inner}</section>'
