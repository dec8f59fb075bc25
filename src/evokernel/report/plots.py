"""PNG copies of the decode benchmark's main plots, for the README and for slides.

    write_bench_pngs(FILES, DIR) -> [DIR/decode_tok_s.png, DIR/decode_pct_floor.png,
                                     DIR/decode_latency.png]

The same series as the HTML page (`bench_page`), drawn by matplotlib, an optional extra
(`pip install 'evokernel[report]'`) imported only here and only when asked for; without it the
call fails with one line saying so. Rendering uses the Agg backend: no display needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evokernel.errors import EvokernelError
from evokernel.files import output_file
from evokernel.report.bench_data import BenchData, floor_tok_s, load_bench
from evokernel.report.bench_page import floor_series, latency_series, throughput_series
from evokernel.report.outcomes import finite
from evokernel.report.svg import Series


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise EvokernelError(
            "--png needs matplotlib, which is not installed: pip install 'evokernel[report]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plain_ticks(ax: Any) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))


def _draw(
    plt: Any,
    series: list[Series],
    title: str,
    ylabel: str,
    path: Path,
    hline: tuple[float, str] | None = None,
) -> Path:
    fig, ax = plt.subplots(figsize=(7.0, 4.0), dpi=120)
    for s in series:
        pts = sorted((x, y) for x, y in s.points if finite(x) and finite(y) and x > 0)
        if not pts:
            continue
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            color=s.color,
            linestyle="--" if s.dashed else "-",
            marker="o" if s.markers else None,
            markersize=4,
            label=s.name,
        )
    if hline is not None:
        ax.axhline(hline[0], color="#1d2329", linestyle="--", linewidth=1, label=hline[1])
    ax.set_xscale("log", base=2)
    _plain_ticks(ax)
    ax.set_xlabel("context position (tokens)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=11)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _subtitle(data: BenchData) -> str:
    model = data.files[0].model.get("name") or "?"
    label = " (CPU, no speed claim)" if data.cpu else ""
    return f"{model} on {data.gpu}{label}"


PNG_NAMES = ("decode_tok_s.png", "decode_pct_floor.png", "decode_latency.png")


def write_bench_pngs(paths: list[Path], out_dir: Path) -> list[Path]:
    plt = _pyplot()
    data = load_bench(list(paths))
    out_dir = Path(out_dir)
    for name in PNG_NAMES:  # only regular files are replaced (matplotlib writes in place)
        output_file(out_dir / name)
    out_dir.mkdir(parents=True, exist_ok=True)
    sub = _subtitle(data)
    floor = Series("bandwidth floor", floor_tok_s(data), "#1d2329", dashed=True, markers=False)
    return [
        _draw(
            plt,
            [*throughput_series(data), floor],
            f"Decode throughput: {sub}",
            "tokens / s",
            out_dir / PNG_NAMES[0],
        ),
        _draw(
            plt,
            floor_series(data),
            f"Share of the bandwidth floor: {sub}",
            "% of the floor",
            out_dir / PNG_NAMES[1],
            hline=(100.0, "floor (100%)"),
        ),
        _draw(
            plt,
            latency_series(data),
            f"Step latency P50 (solid) / P99 (dashed): {sub}",
            "ms per step",
            out_dir / PNG_NAMES[2],
        ),
    ]
