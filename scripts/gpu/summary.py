"""The GPU check's last lines: one short table of every section's figures, read from the
JSON files the sections wrote under OUT. Missing files are reported, not guessed."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def main(out: Path) -> None:
    print("\n===== GPU check summary =====")
    env = _load(out / "env.json") or {}
    if env:
        print(
            f"GPU {env.get('gpu')} | driver {env.get('driver')} | torch {env.get('torch')} | "
            f"triton {env.get('triton')} | copy {env.get('copy_gbs')} GB/s"
        )
    sections = out / "sections.jsonl"
    if sections.exists():
        for line in sections.read_text().splitlines():
            s = json.loads(line)
            print(f"  section {s['section']:<10} rc={s['rc']:<3} {s['wall_s']:>5} s")
    for name in ("verify", "verify_torch"):
        v = _load(out / f"engine_{name}.json")
        if v:
            print(
                f"  {name:<16} KL mean {v.get('kl_mean'):.3g} max {v.get('kl_max'):.3g} "
                f"argmax {v.get('argmax_agreement')} passed={v.get('passed')}"
            )
    for name in ("generate", "generate_no_pdl", "generate_eager", "generate_torch"):
        g = _load(out / f"engine_{name}.json")
        if g:
            print(
                f"  {name:<16} decode {g.get('decode_tok_s', 0):.1f} tok/s, "
                f"prefill {g.get('prefill_ms', 0):.2f} ms"
            )
    ev = _load(out / "evaluator_check.json")
    if ev and "table" in ev:
        for row in ev["table"]:
            print("  " + row)
    stages = _load(out / "decode_stages.json")
    if stages:
        for v in stages.get("variants", []):
            steps = ", ".join(
                f"@{p} {s['tok_s']:.0f} tok/s ({s['pct']:.1f}%)" for p, s in v["steps"].items()
            )
            per = " ".join(f"{k} {s['us']:.1f}" for k, s in v["stages"].items())
            print(f"  stages {v['name']:<9} {steps}")
            print(f"  {'':<16} us/layer: {per}")
    sync = _load(out / "sync_costs.json")
    if sync:
        from evokernel.bench.sync_costs import table

        for row in table(sync):
            print("  " + row)
    evo = _load(out / "evolve_bench.json")
    if evo and "table" in evo:
        for row in evo["table"]:
            print("  " + row)
    speed = _load(out / "eval_throughput.json")
    if speed and "total" in speed:
        t = speed["total"]
        ph = t["phases_s"]
        print(
            f"  eval throughput on {speed.get('hardware')}: {t['evals_per_min']:.1f} evals/min "
            f"({t['evaluations']} evaluated, {t['not_started']} not started, "
            f"{speed.get('workers')} in flight); per evaluation startup {ph['startup']:.1f} s, "
            f"correctness {ph['correctness']:.1f} s, timing {ph['timing']:.1f} s (GPU held "
            f"{t['gpu_held_s']:.2f} s); false rejections {t['false_rejections']}"
        )
    for suite in ("quick", "full"):
        bench = _load(out / f"bench_decode_{suite}.json")
        if bench:
            print(f"  bench decode ({suite}): tok/s (% of floor) by position")
            for r in bench.get("results", []):
                figure = (
                    f"error: {r['error']}"
                    if r.get("error")
                    else f"{r['tok_s']:.1f} tok/s ({r['pct_floor']:.1f}%)"
                )
                print(f"    {r['system']:<11} {r['position']:>6}  {figure}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "out"))
