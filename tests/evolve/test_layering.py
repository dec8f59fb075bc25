"""The search's layering: the pure modules (what a run is, how it is read, how it is
configured, where evaluations go) load without torch, Triton, Ray, the task package, the
mutators or the LLM client, so readers of a run (status, reports) and remote workers stay light."""

from __future__ import annotations

import json
import subprocess
import sys

PURE = [
    "types",
    "sections",
    "config",
    "database",
    "rundir",
    "islands",
    "map_elites",
    "fitness",
    "insights",
    "cascade",
    "summary",
    "dispatch",
    "status",
    "progress",
    "threads",
    "jobs",
    "backends",
    "backends.base",
    "backends.local",
    "backends.raycluster",
    "llm.config",
    "llm.accounting",
    "mutators.config",
    "openevolve_config",
    "generic_eval",
    "stages",
    "llm.probe",
]
HEAVY = [
    "torch",
    "triton",
    "ray",
    "evokernel.tasks",
    "evokernel.evaluate.api",
    "evokernel.evolve.llm.client",
    "evokernel.evolve.mutators.registry",
    "evokernel.evolve.controller",
]


def _loaded_after(modules: list[str]) -> list[str]:
    imports = "; ".join(
        ["import evokernel.evolve", *(f"import evokernel.evolve.{m}" for m in modules)]
    )
    code = (
        f"import sys, json; {imports}; "
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_pure_modules_import_nothing_heavy():
    assert _loaded_after(PURE) == []


def test_the_package_exports_lazily():
    assert _loaded_after([]) == []  # `import evokernel.evolve` alone
    code = "import evokernel.evolve as e; print(e.run_search.__module__, e.open_backend.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["evokernel.evolve.session", "open_backend"], out.stderr
