#!/usr/bin/env bash
# The README's pictures from real results: renders a run report and a decode benchmark report,
# then takes the PNGs the README shows.
#   scripts/report_images.sh RUN_DIR BENCH.json OUTDIR
# writes
#   OUTDIR/run_report.html   RUN_DIR's report          OUTDIR/report.png  its screenshot (the
#   OUTDIR/decode.html       the benchmark's report                       best program selected)
#   OUTDIR/decode_tok_s.png, decode_pct_floor.png, decode_latency.png     the decode plots
# Needs Chromium (scripts/setup.sh test installs Debian's) and matplotlib (extra "report").
# Runs from the source tree as it is (PYTHONPATH=src), with ./.venv when there is one.
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 RUN_DIR BENCH.json OUTDIR" >&2
  exit 2
fi
run_dir=$(realpath "$1")
bench=$(realpath "$2")
mkdir -p "$3"
out=$(realpath "$3")
root=$(cd "$(dirname "$0")/.." && pwd)
py=python3
[ -x "$root/.venv/bin/python" ] && py="$root/.venv/bin/python"
export PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}"

"$py" -m evokernel report "$run_dir" --out "$out/run_report.html"
"$py" -m evokernel report "$bench" --out "$out/decode.html" --png "$out"

browser=${EVOKERNEL_CHROMIUM:-}
for candidate in chromium chromium-browser google-chrome; do
  [ -n "$browser" ] && break
  browser=$(command -v "$candidate" || true)
done
if [ -z "$browser" ]; then
  echo "error: no Chromium for the screenshot (scripts/setup.sh test installs it)" >&2
  exit 2
fi
# The page opens on the best program, its lineage highlighted and its details shown.
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,960 \
  --screenshot="$out/report.png" "file://$out/run_report.html" 2>/dev/null
ls -l "$out"/report.png "$out"/decode_*.png
