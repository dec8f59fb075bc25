#!/usr/bin/env bash
# Set up (idempotent) and run every check: lint, format, types, tests. CI runs exactly this.
# Extra arguments go to pytest, e.g. ./test.sh tests/model -x
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh test
# shellcheck disable=SC1091
. .venv/bin/activate
ruff check src tests scripts
ruff format --check src tests scripts
mypy
pytest "$@"
