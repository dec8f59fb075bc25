"""`evokernel tasks [NAME] [--json]`: the kernel tasks with their interfaces, scenarios (public
ones; hidden ones are only counted), dtypes, tolerances, baselines and the seed's knobs.
`--json` ends stdout with one JSON line: {"tasks": [<evokernel.tasks.describe.describe(task)>]}.
"""

from __future__ import annotations

import argparse
import json

from evokernel.errors import TaskError

ORDER = 50


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasks", help="list kernel tasks with their interfaces")
    p.add_argument("name", nargs="?", help="show one task only")
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evokernel.tasks import SHAPED_TASKS, all_tasks, get_task
    from evokernel.tasks.describe import describe, render

    if args.name is not None and not args.name.strip():
        raise TaskError("empty task name (omit NAME to list every task)")
    tasks = (
        [get_task(args.name)]
        if args.name is not None
        else [*all_tasks(), *(get_task(n) for n in SHAPED_TASKS)]
    )
    infos = [describe(t) for t in tasks]
    print("\n\n".join(render(info) for info in infos))
    if args.json:
        print(json.dumps({"tasks": infos}))
    return 0
