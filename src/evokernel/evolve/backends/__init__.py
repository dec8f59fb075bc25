"""Evaluation backends: where the search's evaluations run (see `base.py` for the contract).

  backend = open_backend(cfg, device)       # cfg.backend, cfg.evaluator.workers
  try:
      ...                                    # run one search, or several (evokernel tune)
  finally:
      backend.close()

base.py        Backend, Evaluation, BackendError; the fault contract
local.py       LocalBackend: one worker per visible GPU of this machine (or CPU slots)
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
    Evaluations at once: `cfg.evaluator.workers`, or 0 = one per visible GPU (local, cuda),
    1 (local, cpu), the cluster's GPUs (ray, cuda) or CPUs (ray, cpu)."""
    config, workers = cfg.backend, cfg.evaluator.workers
    if config.kind == "ray":
        from evokernel.evolve.backends.raycluster import RayBackend

        return RayBackend(device, config.address, workers, config.max_retries)
    gpus = visible_gpus(device)
    count = workers or (max(1, gpus) if device == "cuda" else 1)
    from evokernel.evolve.backends.local import LocalBackend

    return LocalBackend(count, gpus, config.max_retries)
