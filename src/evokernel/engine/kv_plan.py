"""How big a serving KV cache is, and whether it fits: checked before it is allocated.

    check_kv_fits(model, max_batch=32, max_len=4096)   # raises ConfigError when it does not

The cache holds `max_batch` sequences of `max_len` positions (engine/cache.py): 2 * L * Hkv *
D * itemsize bytes per position per sequence (114,688 B for Qwen3-0.6B in bf16). Beside it the
server needs working memory: one prefill of up to `max_len` tokens, or as many as the staging
rows hold (the largest activations: the gate/up product, [T, 2I]), the prefill graphs' staging
rows of the cache, and the logits
of the sampling graphs ([B, V] float32 per batch and context bucket), plus a fixed margin for
the allocator and the CUDA graphs. On CUDA the budget is the free memory after the weights
(`torch.cuda.mem_get_info`); on the CPU, MemAvailable. The error names both numbers and what
would fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from evokernel.engine.decoder import DecoderModel
from evokernel.errors import ConfigError

MARGIN = 1 << 30  # allocator slack, CUDA graph pools, cuBLAS workspaces
GIB = float(1 << 30)


@dataclass(frozen=True)
class KVPlan:
    per_position: int  # bytes of one position of one sequence (all layers, K and V)
    cache_bytes: int
    work_bytes: int
    free_bytes: int
    where: str

    @property
    def fits(self) -> bool:
        return self.cache_bytes + self.work_bytes <= self.free_bytes


def plan_kv(
    model: DecoderModel, max_batch: int, max_len: int, logits_rows: int, staging_rows: int = 0
) -> KVPlan:
    """`logits_rows`: rows of [*, V] float32 logits the sampling graphs keep; `staging_rows`:
    cache rows of `max_len` positions the prefill graphs write prompts into first."""
    cfg = model.cfg
    itemsize = torch.empty((), dtype=model.dtype).element_size()
    per_position = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * itemsize
    widest = 2 * cfg.intermediate_size + (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * (
        cfg.head_dim
    )
    prefill = max(1, staging_rows) * max_len * (widest + 4 * cfg.hidden_size) * 4
    staging = staging_rows * per_position * max_len
    work = MARGIN + prefill + staging + logits_rows * cfg.vocab_size * 4
    free, where = _free_bytes(model.device)
    return KVPlan(per_position, per_position * max_batch * max_len, work, free, where)


def check_kv_fits(
    model: DecoderModel, max_batch: int, max_len: int, logits_rows: int, staging_rows: int = 0
) -> KVPlan:
    plan = plan_kv(model, max_batch, max_len, logits_rows, staging_rows)
    if plan.fits:
        return plan
    room = max(0, plan.free_bytes - plan.work_bytes)
    batch_fit = room // (plan.per_position * max_len)
    len_fit = room // (plan.per_position * max_batch)
    raise ConfigError(
        f"the KV cache for --max-batch {max_batch} x --max-len {max_len} needs "
        f"{plan.cache_bytes / GIB:.2f} GiB ({plan.per_position:,} B per position per sequence), "
        f"but {plan.free_bytes / GIB:.2f} GiB of {plan.where} memory is free after the weights "
        f"and {plan.work_bytes / GIB:.2f} GiB are kept for prefill, logits and graphs; at "
        f"--max-len {max_len} at most {batch_fit} sequences fit, at --max-batch {max_batch} "
        f"at most {len_fit} positions"
    )


def _free_bytes(device: torch.device) -> tuple[int, str]:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free), f"GPU ({torch.cuda.get_device_name(device)})"
    return _mem_available(), "host"


def _mem_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62  # unknown: do not refuse
