"""A real search (controller, database, offline / crossover / LLM-diff mutators, an
OpenAI-compatible HTTP endpoint on 127.0.0.1) on a kernel-shaped problem whose evaluation is
scripted: the CPU cannot time kernels, and the report needs what a GPU run stores (per-scenario
speedups with intervals, roofline fractions, evaluator phases, the device). A knob, MODE, picks
the evaluation's outcome, and the scripted offline mutator sets it by iteration so that every
failure category appears. The LLM's answers carry markup and script, as a hostile model's
might, to prove the page shows them as text.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from evokernel.evaluate.result import DeviceInfo, EvalResult, ScenarioResult, TimingStats
from evokernel.evolve import fitness as fit
from evokernel.evolve.config import config_from_dict
from evokernel.evolve.session import create_session
from evokernel.evolve.types import MutationContext, Proposal
from evokernel.reasons import reason
from evokernel.tasks import blocks

SEED = '''"""A kernel-shaped toy: its knobs set its speed and, through MODE, its fate."""

# EVOLVE-BLOCK-START
BLOCK = 64  # tune: 16, 32, 64, 128
WARPS = 4  # tune: 1, 2, 4, 8
MODE = 0  # tune: 0, 1, 2, 3, 4, 5


def kernel(x):
    return x * BLOCK
# EVOLVE-BLOCK-END


def entry(x):
    return kernel(x)
'''

SCENARIOS = [
    ("b1_s512", "short"),
    ("b1_s4096", "long"),
    ("b4_s1024", "short"),
    ("b8_s8192", "long"),
]

HOSTILE = (
    '</script><script>alert(1)</script><img src="https://evil.example/x.png" onerror="alert(2)">'
)

# MODE -> the reason a program fails with (0: correct)
FAILURES = {
    1: reason("mismatch", "rel_l2 0.41 > 0.01 on scenario b1_s512"),
    2: reason("timeout", "exceeded 30 s; process group killed"),
    3: reason("crashed", "the worker died from signal SIGSEGV"),
    4: reason("static", "forbidden construct: import ctypes"),
    5: reason("infrastructure", "the worker failed: no GPU slot"),
}
SCHEDULE = [0, 1, 0, 2, 0, 3, 0, 4, 0, 0, 5, 0]  # MODE by iteration


def _stats(us: float) -> TimingStats:
    return TimingStats(median_us=us, p5_us=us * 0.97, p95_us=us * 1.04, n=50, outliers_dropped=1)


def scripted_result(code: str) -> EvalResult:
    knobs = blocks.knob_values(code)
    mode = int(knobs.get("MODE", 0))
    device = DeviceInfo(
        kind="cuda",
        name="NVIDIA H200",
        torch="2.11.0+cu130",
        triton="3.6.0",
        driver="580.159.04",
        sm_count=132,
        l2_bytes=62914560,
        copy_gbps=4231.0,
        clocks="sm 1980 MHz, mem 3201 MHz",
    )
    phases = {"startup": 1.9, "load": 0.4}
    if mode in FAILURES:
        stage = "static" if mode == 4 else "correctness"
        return EvalResult(
            task="toy_kernel",
            candidate="sha256:toy",
            correct=False,
            reasons=[FAILURES[mode]],
            stage=stage,
            device=device,
            timing_label="cuda-events",
            artifacts={
                "phases": json.dumps({**phases, "correctness": 0.8}),
                "stderr": f"candidate stderr for mode {mode} {HOSTILE}",
            },
        )
    block, warps = int(knobs.get("BLOCK", 64)), int(knobs.get("WARPS", 4))
    base = 0.8 + 0.1 * (block / 32) - 0.03 * abs(warps - 4)
    scenarios = []
    for k, (name, regime) in enumerate(SCENARIOS):
        sp = base * (1.0 + 0.05 * k if regime == "long" else 1.0 - 0.02 * k)
        scenarios.append(
            ScenarioResult(
                name=name,
                regime=regime,
                params={"batch": 1 + k},
                dtype="bfloat16",
                candidate=_stats(10.0 / sp),
                baselines={"torch_sdpa": _stats(10.0)},
                baseline="torch_sdpa",
                speedup=sp,
                speedup_ci=(sp * 0.97, sp * 1.03),
                bytes_moved=1 << 20,
                achieved_gbps=1500.0 * sp,
                roofline_us=3.0,
                pct_roofline=30.0 * sp,
                host_event_ratio=1.01,
            )
        )
    return EvalResult(
        task="toy_kernel",
        candidate="sha256:toy",
        correct=True,
        reasons=[],
        stage="done",
        device=device,
        timing_label="cuda-events",
        scenarios=scenarios,
        artifacts={"phases": json.dumps({**phases, "correctness": 2.2, "timing": 5.1})},
    )


class ScriptedProblem:
    """The kernel-problem interface the controller uses, with `scripted_result` as evaluator."""

    def __init__(self) -> None:
        self.name = "toy_kernel"
        self.device = "cuda"
        self.seed_code = SEED
        self.interface = "def entry(x)"
        self.description = "a kernel-shaped toy"
        self.regimes = ["short", "long"]
        self.scenarios = list(SCENARIOS)
        self.timed = True
        self.fitness_kind = "speedup"
        self.fitness_label = fit.fitness_label("cuda")
        self.screens = False

    def evaluate(
        self, code: str, *, gpu: int = 0, promote_above: float | None = None
    ) -> EvalResult:
        return scripted_result(code)

    def fitness(self, result: EvalResult) -> float | None:
        return fit.kernel_fitness(result, "cuda")

    def features(self, result: EvalResult) -> dict[str, float]:
        return {}

    def label_for(self, seed: EvalResult) -> str:
        return self.fitness_label

    def regime_speedups(self, result: EvalResult) -> dict[str, float]:
        return fit.regime_speedups(result)

    def hardware(self, result: EvalResult | None) -> dict[str, Any]:
        return {"gpu": "NVIDIA H200"}

    def spec(self) -> dict[str, Any]:
        return {"kind": "scripted", "task": "toy_kernel"}


class ScheduledOffline:
    """The real offline mutator, with MODE then set by the iteration's place in SCHEDULE."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = "offline"

    def propose(self, ctx: MutationContext) -> Proposal:
        prop = self.inner.propose(ctx)
        if prop.code is not None:
            mode = SCHEDULE[ctx.iteration % len(SCHEDULE)]
            prop.code = blocks.set_knobs(prop.code, {"MODE": mode})
        return prop


class _LLM(BaseHTTPRequestHandler):
    count = 0

    def do_POST(self) -> None:
        json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _LLM.count += 1
        answer = (
            f"Change: tag the kernel {HOSTILE}\n<<<<<<< SEARCH\n    return x * BLOCK\n=======\n"
            f"    return x * BLOCK  # v{_LLM.count} {HOSTILE}\n>>>>>>> REPLACE\n"
        )
        doc = {
            "choices": [{"message": {"role": "assistant", "content": answer}}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 120},
        }
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def llm_endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LLM)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def timed_run(out: Path, iterations: int = 36) -> Path:
    """A finished run in `out` with timed scenarios, every failure category and LLM usage."""
    with llm_endpoint() as endpoint:
        cfg = config_from_dict(
            {
                "seed": 3,
                "in_flight": 1,
                "islands": {"count": 3, "migration_interval": 3, "migration_count": 1},
                "mutators": {"weights": {"offline": 0.6, "crossover": 0.15, "llm_diff": 0.25}},
                "llm": {
                    "api_base": endpoint,
                    "models": [
                        {
                            "name": "stub-coder",
                            "prompt_usd_per_mtok": 0.5,
                            "completion_usd_per_mtok": 2.0,
                        }
                    ],
                    "retries": 0,
                },
                "budget": {"iterations": iterations},
            }
        )
        session = create_session(out, ScriptedProblem(), cfg)
        try:
            mutators = session.build_mutators()
            mutators.mutators["offline"] = ScheduledOffline(mutators.mutators["offline"])
            session.execute(mutators=mutators, stream=io.StringIO(), live=False)
        finally:
            session.close()
    return out
