"""A task as plain data (JSON-ready) and as text: what `evokernel tasks` prints, and what the
search shows an LLM about a task. Hidden scenarios are never described (only how many a draw
holds)."""

from __future__ import annotations

import math
import textwrap
from typing import Any

import torch

from evokernel.tasks.base import Task
from evokernel.tasks.blocks import parse_knobs

DEVICES = ("cuda", "cpu")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def describe(task: Task) -> dict[str, Any]:
    knobs = parse_knobs(task.seed_candidate.read_text())
    all_dtypes = sorted({d for ds in task.dtypes.values() for d in ds}, key=dtype_name)
    scenarios: dict[str, list[dict[str, Any]]] = {}
    for device in DEVICES:
        timed = task.dtypes[device][0]
        scenarios[device] = [
            {
                "name": s.name,
                "regime": s.regime,
                "params": dict(s.params),
                "baselines": sorted(task.baselines(s)),
                "dtype": dtype_name(timed),
                "bytes_moved": task.bytes_moved(s, timed),
                "rotating_bytes": task.rotating_bytes(s, timed),
                "flops": task.flops(s),
            }
            for s in task.scenarios(device)
        ]
    return {
        "name": task.name,
        "entry_point": task.entry_point,
        "interface": task.interface,
        "description": task.description,
        "seed_candidate": str(task.seed_candidate),
        "dtypes": {dev: [dtype_name(d) for d in ds] for dev, ds in task.dtypes.items()},
        "tolerances": {
            dtype_name(d): {
                "rel_l2": task.tolerance(d).rel_l2,
                "max_abs_rel": task.tolerance(d).max_abs_rel,
            }
            for d in all_dtypes
        },
        "knobs": [{"name": k.name, "value": k.value, "choices": list(k.choices)} for k in knobs],
        "knob_space": math.prod(len(k.choices) for k in knobs),
        "scenarios": scenarios,
        "hidden_per_draw": {dev: len(task.hidden_scenarios(dev, 0)) for dev in DEVICES},
    }


def _mb(n: int) -> str:
    return f"{n / 1e6:.3g} MB"


def render(info: dict[str, Any]) -> str:
    """Human-readable text of `describe(task)`."""
    lines = [f"{info['name']}  (entry point: {info['entry_point']})"]
    lines += textwrap.wrap(info["description"], 98, initial_indent="  ", subsequent_indent="  ")
    lines += ["  interface:", *("    " + line for line in info["interface"].splitlines())]
    dtypes = "; ".join(
        f"{dev}: {', '.join(ds)} (first timed)" for dev, ds in info["dtypes"].items()
    )
    lines.append(f"  dtypes: {dtypes}")
    tols = "; ".join(
        f"{d} rel_l2<={t['rel_l2']:g} max_abs_rel<={t['max_abs_rel']:g}"
        for d, t in info["tolerances"].items()
    )
    lines.append(f"  tolerances: {tols}")
    knobs = ", ".join(
        f"{k['name']}={k['value']!r} of {{{', '.join(map(repr, k['choices']))}}}"
        for k in info["knobs"]
    )
    lines.append(f"  seed: {info['seed_candidate']}")
    lines.append(f"  knobs ({info['knob_space']} combinations): {knobs}")
    for device, rows in info["scenarios"].items():
        hidden = info["hidden_per_draw"][device]
        lines.append(f"  scenarios on {device} (+{hidden} hidden per evaluation):")
        width = max(len(r["name"]) for r in rows)
        for r in rows:
            params = " ".join(f"{k}={v}" for k, v in r["params"].items())
            lines.append(
                f"    {r['name']:<{width}}  {r['regime']:<6}  {params}  "
                f"[{_mb(r['bytes_moved'])} {r['dtype']}; baselines: {', '.join(r['baselines'])}]"
            )
    return "\n".join(lines)
