"""The search simulation: the real controller and mutators on a table landscape (no
evaluator, no GPU); a measured landscape from an evolve_bench JSON is used when complete."""

from __future__ import annotations

import json

from evokernel.bench import search_sim
from evokernel.evolve import fitness as fit
from evokernel.tasks import blocks, get_task


def test_synthetic_landscape_covers_the_knob_space_deterministically():
    source = get_task("decode_linear").seed_candidate.read_text()
    land = search_sim.synthetic("decode_linear", 3)
    assert len(land) == blocks.knob_space_size(source)
    assert land == search_sim.synthetic("decode_linear", 3)
    assert land != search_sim.synthetic("decode_linear", 4)


def test_a_search_reaches_part_of_the_best_and_the_report_is_json(capsys):
    land = search_sim.synthetic("decode_linear", 0)
    found = search_sim.search_once("decode_linear", land, {"weights": {"offline": 1.0}}, 0)
    assert 0 < found <= search_sim.best_fitness(land)
    assert search_sim.main(["--runs", "1", "--tasks", "decode_linear"]) == 0
    (report,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["landscape"] == "synthetic"
    assert set(report["settings"]) == set(search_sim.SETTINGS)


def test_measured_landscape_from_a_complete_exhaustive_arm(tmp_path):
    source = get_task("decode_linear").seed_candidate.read_text()
    programs = [
        {"knobs": values, "fitness": 1.0, "lower": {"o_m1": 1.5, "qkv_m1": 0.8}}
        for values in blocks.knob_space(source)
    ]
    bench = tmp_path / "evolve_bench.json"
    task = {"task": "decode_linear", "exhaustive": {"programs": programs}}
    bench.write_text(json.dumps({"tasks": [task]}))
    land = search_sim.measured("decode_linear", bench)
    assert land is not None and len(land) == len(programs)
    assert search_sim.best_fitness(land) == fit.geomean([1.5, 0.8])
    task["exhaustive"]["programs"] = programs[:-1]  # an incomplete sweep is not a landscape
    bench.write_text(json.dumps({"tasks": [task]}))
    assert search_sim.measured("decode_linear", bench) is None
