"""Evaluation backends: where the search's evaluations run (see `base.py` for the contract).

  backend = open_backend(cfg, device)       # cfg.backend, cfg.evaluator.workers
  try:
      ...                                    # run one search, or several (evokernel tune)
  finally:
      backend.close()

base.py        Backend, Evaluation, BackendError; the fault contract
local.py       LocalBackend: workers over the visible GPUs of this machine (or CPU slots)
raycluster.py  RayBackend: one Ray task per evaluation, pinned to one GPU of a cluster
               (imported only when chosen; needs `pip install 'evokernel[ray]'`)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evokernel.evolve.backends.base import Backend, BackendError, Evaluation

if TYPE_CHECKING:
    from evokernel.evolve.config import SearchConfig

__all__ = ["Backend", "BackendError", "Evaluation", "open_backend", "visible_gpus"]


def visible_gpus(device: str) -> int:
    """GPUs this process sees (0 on cpu)."""
    if device != "cuda":
        return 0
    import torch

    return torch.cuda.device_count()


def open_backend(cfg: SearchConfig, device: str) -> Backend:
    """The backend `cfg.backend.kind` names, for evaluations on `device` ("cuda" | "cpu").
    Evaluations at once: `cfg.evaluator.workers`, or 0 = the evaluator's
    `default_workers` (local, cuda: several per visible GPU, sized to the cores; their timed
    phases take turns on each GPU), 1 (local, cpu), the cluster's GPUs (ray, cuda) or CPUs
    (ray, cpu)."""
    config, workers = cfg.backend, cfg.evaluator.workers
    if config.kind == "ray":
        from evokernel.evolve.backends.raycluster import RayBackend

        return RayBackend(device, config.address, workers, config.max_retries)
    gpus = visible_gpus(device)
    if not workers and device == "cuda" and gpus:
        from evokernel.evaluate import default_workers

        workers = default_workers(device)
    count = workers or 1
    from evokernel.evolve.backends.local import LocalBackend

    return LocalBackend(count, gpus, config.max_retries)
