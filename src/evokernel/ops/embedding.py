"""Launcher for the embedding gather (kernels/embedding.py).

`embed(weight, ids, *, pdl=False)` has ops/reference.py's signature and result for valid ids:
weight [V, H] (rows contiguous), ids of any shape -> [*ids.shape, H]. An id outside [0, V)
gives a zero row instead of torch's device-side error. `pdl`: launched with programmatic
dependent launch (CUDA sm_90+ only), so the kernel after it can start early.
"""

from __future__ import annotations

import torch

from evokernel.ops.grid import next_pow2, row_warps


def embed(weight: torch.Tensor, ids: torch.Tensor, *, pdl: bool = False) -> torch.Tensor:
    from evokernel.kernels.embedding import embed_kernel

    V, H = weight.shape
    assert weight.stride(1) == 1, "embedding rows must be contiguous"
    assert ids.dtype in (torch.int32, torch.int64), f"ids must be int32/int64, got {ids.dtype}"
    assert ids.device == weight.device, (ids.device, weight.device)
    flat = ids.reshape(-1)
    out = torch.empty((flat.shape[0], H), device=weight.device, dtype=weight.dtype)
    if flat.shape[0] > 0:
        block = next_pow2(H)
        embed_kernel[(flat.shape[0],)](
            flat, weight, out, V, H, weight.stride(0), out.stride(0),
            BLOCK_H=block, PDL=pdl, num_warps=row_warps(block), launch_pdl=pdl,
        )  # fmt: skip
    return out.view(*ids.shape, H)
