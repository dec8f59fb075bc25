"""Reports people read by looking: one self-contained HTML page per run or benchmark.

    run_page.write_run_report(RUN_DIR, out=None) -> Path     RUN_DIR/report.html
    bench_page.write_bench_report(FILES, out=None) -> Path   FILE.html next to the first file
    plots.write_bench_pngs(FILES, DIR) -> list[Path]         PNG plots (matplotlib extra)

Data flow: `run_data` reads a run directory (read-only) into plain records, `tree_layout` places
the evolution tree, `run_page` renders them with the chart primitives of `svg` into `page`'s
skeleton. `bench_data` reads `bench decode` result files; `bench_page` and `plots` render
them. A page loads nothing from anywhere: styles, script and data are inlined, and every
string from a run (candidate code, reasons, stdout) is escaped before it reaches the markup.
"""
