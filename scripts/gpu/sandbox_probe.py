"""Which sandbox layers this machine allows, and whether CUDA and Triton work inside each:
`PYTHONPATH=src python3 scripts/gpu/sandbox_probe.py [--device cuda|cpu] [--evals N]`.

1. For every layer alone (cgroup, netns, pidns, rlimits, uid, landlock, seccomp), for none,
   for all of them and for all but the PID namespace, a fresh process enters the sandbox
   (process/confine.py), imports torch and Triton, initialises CUDA (device count, an
   allocation) and compiles and runs a small Triton kernel, checking its result. One row each:
   the layers that held, CUDA ok, Triton ok, seconds per step, the error if any.
2. What the sandbox costs per evaluation: the decode_linear seed on one public scenario,
   evaluated `--evals` times with the full sandbox and as many times with every layer
   switched off (EVOKERNEL_SANDBOX_DISABLE), alternating; median wall and start-up seconds.

Writes ${OUT:-out}/sandbox_probe.json; the last lines printed are the table. Exit 0 when the
full sandbox (or, failing that, all but pidns) runs CUDA and Triton, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAYERS = ("cgroup", "netns", "pidns", "rlimits", "uid", "landlock", "seccomp")
OFF = ",".join(LAYERS)


def child(conf_json: str, device: str) -> None:
    """Runs inside the sandbox; prints one JSON line."""
    from evokernel.evaluate.process.confine import Confinement, enter

    out: dict[str, object] = {}
    t0 = time.perf_counter()
    out["layers"] = enter(Confinement.from_json(conf_json))
    t1 = time.perf_counter()
    out["enter_s"] = round(t1 - t0, 4)
    try:
        import torch
        import triton
        import triton.language as tl

        t2 = time.perf_counter()
        out["import_s"] = round(t2 - t1, 2)
        if device == "cuda":
            torch.cuda.init()
            out["device_count"] = torch.cuda.device_count()
            torch.ones(1 << 20, device="cuda").sum().item()
            out["cuda_ok"] = True
        t3 = time.perf_counter()
        out["cuda_s"] = round(t3 - t2, 2)

        @triton.jit
        def add_one(x_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)

        x = torch.zeros(1000, device=device)
        add_one[(8,)](x, 1000, BLOCK=128)
        out["triton_ok"] = bool((x == 1.0).all())
        out["triton_s"] = round(time.perf_counter() - t3, 2)
    except Exception as err:  # reported, not raised: the row says what broke
        out["error"] = f"{type(err).__name__}: {str(err)[:300]}"
    print(json.dumps(out), flush=True)


def run_one(layers: tuple[str, ...], device: str) -> dict[str, object]:
    from evokernel.evaluate.process import policy
    from evokernel.evaluate.process.cgroup import Cgroup

    scratch = Path(tempfile.mkdtemp(prefix="evokernel-probe-"))
    for sub in ("tmp", "home", "triton"):
        (scratch / sub).mkdir()
    uid = policy.drop_uid()
    if uid is not None:
        for p in (scratch, *scratch.iterdir()):
            os.chown(p, uid, uid)
    cgroup = Cgroup.create() if "cgroup" in layers else None
    env = policy.child_env(
        scratch, triton_interpret="1" if device == "cpu" else None, threads=4, extra=None
    )
    conf = policy.confinement(
        str(scratch), env=env, read=(str(HERE),), cgroup=cgroup.path if cgroup else None
    )
    conf = type(conf)(**{**conf.__dict__, "layers": layers})
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", conf.to_json(), device],
            env=env, cwd=scratch, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        lines = proc.stdout.strip().splitlines()
        row: dict[str, object] = json.loads(lines[-1]) if lines else {}
        if not lines:
            row["error"] = f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
    except (subprocess.SubprocessError, ValueError) as err:
        row = {"error": str(err)[:300]}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if cgroup is not None:
            cgroup.remove()
    row["wall_s"] = round(time.perf_counter() - start, 2)
    return row


def cost(device: str, evals: int) -> dict[str, object]:
    from evokernel.evaluate import EvalOptions, evaluate
    from evokernel.tasks import get_task

    task = get_task("decode_linear")
    first = task.scenarios(device)[0].name
    options = EvalOptions(seed=3, scenarios=(first,), hidden=False, allow_unsandboxed=True)
    runs: dict[str, list[dict[str, float]]] = {"sandbox": [], "none": []}
    for _ in range(evals):
        for mode in ("sandbox", "none"):
            if mode == "none":
                os.environ["EVOKERNEL_SANDBOX_DISABLE"] = OFF
            else:
                os.environ.pop("EVOKERNEL_SANDBOX_DISABLE", None)
            result = evaluate(task.name, task.seed_candidate, device, options)
            phases = json.loads(result.artifacts.get("phases", "{}"))
            runs[mode].append(
                {"wall_s": result.wall_s, "startup_s": phases.get("startup", 0.0),
                 "correct": result.correct, "sandbox": result.artifacts.get("sandbox", "")}
            )  # fmt: skip
    os.environ.pop("EVOKERNEL_SANDBOX_DISABLE", None)
    summary: dict[str, object] = {"runs": runs, "scenario": first}
    for mode, rows in runs.items():
        summary[f"{mode}_wall_s"] = round(statistics.median(r["wall_s"] for r in rows), 2)
        summary[f"{mode}_startup_s"] = round(statistics.median(r["startup_s"] for r in rows), 2)
    summary["cost_s"] = round(float(summary["sandbox_wall_s"]) - float(summary["none_wall_s"]), 2)
    return summary


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None)
    parser.add_argument("--evals", type=int, default=3, help="evaluations per mode (0: skip)")
    args = parser.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    configs: dict[str, tuple[str, ...]] = {"none": ()}
    configs.update({layer: (layer,) for layer in LAYERS})
    configs["all"] = LAYERS
    configs["all but pidns"] = tuple(x for x in LAYERS if x != "pidns")
    rows = {}
    table = [f"{'layers asked':<14} cuda  triton  enter_s  wall_s  held / error"]
    for name, layers in configs.items():
        row = run_one(layers, device)
        rows[name] = row
        held = ", ".join(str(x) for x in row.get("layers", []))  # type: ignore[union-attr]
        cuda = "-" if device == "cpu" else ("ok" if row.get("cuda_ok") else "FAIL")
        tri = "ok" if row.get("triton_ok") else "FAIL"
        line = (
            f"{name:<14} {cuda:<5} {tri:<7} {row.get('enter_s', '-')!s:<8} "
            f"{row.get('wall_s', '-')!s:<7} {held} {str(row.get('error', ''))[:120]}"
        )
        table.append(line)
        print(line, flush=True)
    report: dict[str, object] = {"device": device, "configs": rows}
    if args.evals > 0:
        report["cost"] = c = cost(device, args.evals)
        table.append(
            f"cost per evaluation ({c['scenario']}, median of {args.evals}): wall "
            f"{c['sandbox_wall_s']} s sandboxed vs {c['none_wall_s']} s without "
            f"({c['cost_s']:+} s); start-up {c['sandbox_startup_s']} s vs {c['none_startup_s']} s"
        )
    ok = any(rows[k].get("triton_ok") and (device == "cpu" or rows[k].get("cuda_ok"))
             for k in ("all", "all but pidns"))  # fmt: skip
    table.append(f"sandbox probe: {'ok' if ok else 'FAIL'} (full sandbox: "
                 f"{'ok' if rows['all'].get('triton_ok') else 'fails'})")  # fmt: skip
    report["table"] = table
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "sandbox_probe.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"\nwrote {out / 'sandbox_probe.json'}\n")
    print("\n".join(table))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
