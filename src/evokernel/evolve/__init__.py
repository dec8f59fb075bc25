"""The evolutionary search (see docs/evolution-design.md, docs/scale-out.md).

Running a search from Python, on a given evaluation backend (what `evokernel evolve` does, and
what a caller that searches several problems does with one backend for all of them):

    from pathlib import Path
    from evokernel.evolve import KernelProblem, load_config, open_backend, run_search

    cfg = load_config("search.yaml")               # or SearchConfig(), config_from_dict({...})
    backend = open_backend(cfg, "cuda")            # cfg.backend: local GPUs, or a Ray cluster
    try:
        for task in ("decode_linear", "gqa_decode_attention"):
            problem = KernelProblem(task, "cuda", cfg)
            outcome = run_search(problem, cfg, Path("runs") / task, backend=backend)
            print(outcome.text())                  # outcome.summary, outcome.table
    finally:
        backend.close()

`run_search(problem, cfg, out, backend=None, resume=False, iterations=None)` runs one search to
its end (`resume=True` continues the run in `out`); without `backend` it opens the one
`cfg.backend` names and closes it. Call `evokernel.device.prepare(device)` first when kernels
run under the CPU interpreter (`open_session` does that for the command line).

Layers, each importing only those above it (the first five load without torch):

  types.py        shared vocabulary: ProgramView, Proposal, Usage, MutationContext, digests
  sections.py     how a config section is built and checked
  config.py       SearchConfig and its sections (llm/config.py, mutators/config.py beside)
  database.py     the run's SQLite database; rundir.py the run directory
  islands.py      islands, grids, parents, migration (pure functions of the rows)
  fitness.py, map_elites.py, insights.py, cascade.py   what a result means for the search
  summary.py, dispatch.py, status.py, progress.py      reading a run
  jobs.py         one evaluation as a JSON job, and running it on a worker
  problem.py, generic.py   what is optimized (kernel task, or a user's evaluator)
  backends/       where evaluations run: local GPUs, or a Ray cluster
  mutators/, llm/, prompts/   how a parent becomes a child
  controller.py   the loop; session.py starts, resumes and runs a search

Exports are resolved lazily, so importing a pure module never loads the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evokernel.evolve.backends import Backend as Backend
    from evokernel.evolve.backends import BackendError as BackendError
    from evokernel.evolve.backends import open_backend as open_backend
    from evokernel.evolve.config import SearchConfig as SearchConfig
    from evokernel.evolve.config import config_from_dict as config_from_dict
    from evokernel.evolve.config import load_config as load_config
    from evokernel.evolve.generic import GenericProblem as GenericProblem
    from evokernel.evolve.problem import KernelProblem as KernelProblem
    from evokernel.evolve.problem import Problem as Problem
    from evokernel.evolve.session import Outcome as Outcome
    from evokernel.evolve.session import run_search as run_search

_EXPORTS = {
    "Backend": "evokernel.evolve.backends",
    "BackendError": "evokernel.evolve.backends",
    "open_backend": "evokernel.evolve.backends",
    "SearchConfig": "evokernel.evolve.config",
    "config_from_dict": "evokernel.evolve.config",
    "load_config": "evokernel.evolve.config",
    "GenericProblem": "evokernel.evolve.generic",
    "KernelProblem": "evokernel.evolve.problem",
    "Problem": "evokernel.evolve.problem",
    "Outcome": "evokernel.evolve.session",
    "run_search": "evokernel.evolve.session",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evokernel.evolve' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
