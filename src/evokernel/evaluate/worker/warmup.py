"""Trusted warm-up of a worker, before any candidate code: compile and launch one Triton kernel,
call every baseline once and (CUDA) open one short profiler session, so that Triton's driver,
cuBLAS/SDPA handles, CUPTI and torch's thread pools exist before the guards take their
snapshot (then any later thread or patch is the candidate's).

Two parts. `prepare_device` (protocol.Init, no device lock) does the host-side work that
launches nothing on the GPU: the CUDA context, the warm-up kernel's compile and module load, and
CUPTI's first initialisation (a profiler session over CPU work only), which alone takes ~7 s on
an H100 host. `warm_up` (protocol.Warm, under the device's shared lock) then launches: the
warm-up kernel, the baselines, a profiler session over one kernel. So the part of a worker's
start-up that holds the device, and with it every timed phase waiting for the device, is short.
`warm_baselines` (a Warm naming a scenario, one per public scenario before that) calls the
baselines once on each timed shape, in holds of its own.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from evokernel.tasks.base import Scenario, Task


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


def prepare_device() -> None:
    """CUDA context, the warm-up kernel compiled and loaded, CUPTI initialised; no GPU work."""
    torch.cuda.init()
    torch.cuda.set_device(0)
    x = torch.empty(100, device="cuda", dtype=torch.float32)  # an allocation: no kernel
    compiled = _add_one.warmup(x, 100, BLOCK=128, grid=(1,))  # compile, no launch
    # Load the module and build the launcher, still no launch (Triton's own lazy step, private:
    # if a Triton version lacks it, the first launch in Warm does it).
    load = getattr(compiled, "_init_handles", None)
    if load is not None:
        load()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities):
        torch.empty(1)  # CPU work only: CUPTI's set-up without touching the GPU


def warm_baselines(task: Task, scenario: Scenario, device: str, dtype: torch.dtype) -> None:
    """Each baseline called once on `scenario`'s inputs (the timed dtype), untimed: a library's
    per-shape set-up (cuDNN's SDPA builds a plan per shape, up to 1.4 s on an H100) happens
    here, in a pool worker before any candidate, instead of inside an evaluation. A baseline
    that fails here is left to the timed rounds, which report it as the baseline's."""
    inputs = task.make_inputs(scenario, 0, dtype, device)
    for fn in task.baselines(scenario).values():
        with contextlib.suppress(Exception):
            fn(**inputs)
    if device == "cuda":
        torch.cuda.synchronize()


def warm_up(task: Task, device: str, dtype: torch.dtype) -> None:
    x = torch.zeros(100, device=device, dtype=torch.float32)
    _add_one[(1,)](x, 100, BLOCK=128)
    if device == "cuda":
        torch.cuda.synchronize()
    if not bool((x == 1.0).all()):
        raise RuntimeError("the warm-up Triton kernel computed a wrong result")
    torch.randn(1 << 22).sum()  # large enough to start torch's intra-op thread pool
    scenario = task.scenarios(device)[0]
    inputs = task.make_inputs(scenario, 0, dtype, device)  # also warms the device's generator
    for fn in task.baselines(scenario).values():
        fn(**inputs)
    if device == "cuda":
        torch.cuda.synchronize()
        # The profiler's first session loads CUPTI and imports more of torch: do it here.
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities):
            x.add_(1.0)
            torch.cuda.synchronize()
