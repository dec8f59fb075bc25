"""`evokernel status RUN_DIR [--json]`: where a search stands, read from its database.

Works while the run is going (the database is read, never written) and after it ended.
`--json` ends stdout with one JSON line holding at least `evaluated`, `iterations_done`,
`iterations_target`, `best` ({id, fitness, ...} or null), `valid`, `failed`, `screened`,
`reused`, `rejected`, `duplicates`, `requeued`, `islands` (member programs per island),
`tokens`, `cost_usd`, `running`, `finished`, `stop_reason` and `error`. A missing directory,
or one whose database is not a run's (garbage, truncated, empty), is one `error:` line, exit 2;
the database is only read.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ORDER = 75


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="where an evolve run stands")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evokernel.evolve.status import read_status

    text, data = read_status(args.run_dir)
    print(text)
    if args.json:
        print(json.dumps(data))
    return 0
