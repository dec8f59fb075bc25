#!/usr/bin/env bash
# Set up (idempotent) and run every check: lint, format, types, tests. CI runs exactly this.
# Extra arguments go to pytest, e.g. ./test.sh tests/model -x
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh test
# shellcheck disable=SC1091
. .venv/bin/activate
# Run the tools as modules of the venv's python: on a CUDA machine they may come from the
# system's (or a parent venv's) site-packages, whose own scripts would run another python.
python -m ruff check src tests scripts
python -m ruff format --check src tests scripts
python -m mypy
python -m pytest "$@"
