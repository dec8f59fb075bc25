"""Published tensors of one module -> the row-major packed weight the kernels read (packed.py).

Runs on the device the model goes to, one module at a time. Everything that could make a
projection compute garbage rather than fail is checked here, each a one-line CheckpointError
naming the tensor: FP8 NaN encodings, `g_idx` entries outside the groups or groups that are
not `group_size` columns each (act-order is run by sorting the columns by group, which needs
every group but the last to be full). Non-finite scales are found by the loader's
`FiniteCheck`.

Unpacking (bit positions as the writers pack them, layout.py):
  GPTQ  qweight [K/p, N]: column k of row n is bits [(k % p)*b, ...) of word [k // p, n];
        qzeros [G, N/p]: the zero of (group g, row n) is bits [(n % p)*b, ...) of [g, n // p]
  AWQ   qweight [K, N/8]: nibble i of word [k, c] is row 8c + (0, 2, 4, 6, 1, 3, 5, 7)[i]
  compressed-tensors pack-quantized: weight_packed [N, K/p]: column k of row n is bits
        [(k % p)*b, ...) of word [n, k // p]; weight_zero_point [N/p, G]: the zero of (row n,
        group g) is bits [(n % p)*b, ...) of [n // p, g]; both hold value + 2**(b-1)

compressed-tensors FP8 scales per channel or per tensor become block scales of the FP8 kernels
(`CT_FP8_BLOCK` columns, one row or `CT_FP8_BLOCK` rows a block), each block's scale the
module's or its row's: the same products, a few more scale bytes.
"""

from __future__ import annotations

import torch

from evokernel.errors import CheckpointError
from evokernel.model.quant.config import CT_WHOLE, ModuleSpec
from evokernel.model.quant.packed import (
    FP8_DTYPE,
    INT_CLASSES,
    Fp8Weight,
    IntWeight,
    cdiv,
    pack_values,
)

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of a word holds column AWQ_ORDER[i]
CT_FP8_BLOCK = 128


def fp8_module(
    prefix: str, weight: torch.Tensor, scale_inv: torch.Tensor, spec: ModuleSpec
) -> Fp8Weight:
    assert weight.dtype == FP8_DTYPE
    nan = (weight.view(torch.uint8) & 0x7F) == 0x7F  # e4m3fn has no Inf; 0x7F/0xFF are NaN
    if bool(nan.any()):
        raise CheckpointError(f"tensor '{prefix}.weight' holds NaN (float8 e4m3 0x7f/0xff)")
    bn, bk = spec.block
    return Fp8Weight(weight.contiguous(), scale_inv.float().contiguous(), bn, bk)


def ct_fp8_module(
    prefix: str, weight: torch.Tensor, scale: torch.Tensor, spec: ModuleSpec
) -> Fp8Weight:
    """compressed-tensors float-quantized (and per-tensor FP8 of quant_method "fp8"): w =
    weight * scale, the scale per row (channel), per module (tensor) or per block."""
    N, K = weight.shape
    b = CT_FP8_BLOCK
    if spec.block == (1, CT_WHOLE):
        grid = scale.float().reshape(N, 1).expand(N, cdiv(K, b))
        block = (1, b)
    elif spec.block == (CT_WHOLE, CT_WHOLE):
        grid = scale.float().reshape(1, 1).expand(cdiv(N, b), cdiv(K, b))
        block = (b, b)
    else:
        grid, block = scale.float(), spec.block
    return fp8_module(prefix, weight, grid.contiguous(), ModuleSpec("fp8", 8, block=block))


def ct_int_module(
    prefix: str,
    packed: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    shape: torch.Tensor,
    g_idx: torch.Tensor | None,
    spec: ModuleSpec,
    rows: int,
    cols: int,
) -> IntWeight:
    """compressed-tensors pack-quantized: w = (q - zero) * scale, q and zero stored plus
    2**(bits-1) (symmetric: no zero point, i.e. 2**(bits-1))."""
    stored = [int(v) for v in shape.tolist()]
    if stored != [rows, cols]:
        raise CheckpointError(
            f"tensor '{prefix}.weight_shape' holds {stored}; config.json implies [{rows}, {cols}]"
        )
    bits, K = spec.bits, cols
    gs = K if spec.group_size == -1 else spec.group_size
    q = unpack_along(packed, bits, 1)  # [N, K]
    zeros = None if zero_point is None else unpack_along(zero_point, bits, 0)  # [N, G]
    perm = _act_order(prefix, g_idx, gs, K, scale.shape[1]) if g_idx is not None else None
    if perm is not None:
        q = q[:, perm.long()]
    return _int_weight(q, scale.contiguous(), zeros, perm, spec, K, gs)


def ct_int8_module(
    prefix: str,
    weight: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    spec: ModuleSpec,
    cols: int,
) -> IntWeight:
    """compressed-tensors int-quantized: w = (weight - zero) * scale, int8 as stored."""
    gs = cols if spec.group_size == -1 else spec.group_size
    zeros = None if zero_point is None else zero_point.to(torch.int32) + 128
    return _int_weight(
        weight.to(torch.int32) + 128, scale.contiguous(), zeros, None, spec, cols, gs
    )


def unpack_along(words: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """int32 words -> unsigned values, the p = 32 / bits values of each word consecutive
    along `dim` (lowest bits first); int32."""
    shifts = torch.arange(0, 32, bits, device=words.device, dtype=torch.int32)
    mask = (1 << bits) - 1
    if dim == 0:
        q = (words.unsqueeze(1) >> shifts.view(1, -1, 1)) & mask  # [R, p, C]
        return q.reshape(-1, words.shape[1])
    q = (words.unsqueeze(-1) >> shifts) & mask  # [R, C, p]
    return q.reshape(words.shape[0], -1)


def gptq_module(
    prefix: str,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor | None,
    spec: ModuleSpec,
    rows: int,
    cols: int,
) -> IntWeight:
    bits, K = spec.bits, cols
    gs = K if spec.group_size == -1 else spec.group_size
    q = unpack_along(qweight, bits, 0).t()  # [N, K]
    zeros = unpack_along(qzeros, bits, 1).t().contiguous()  # [N, G]
    perm = _act_order(prefix, g_idx, gs, K, scales.shape[0]) if g_idx is not None else None
    if perm is not None:
        q = q[:, perm.long()]
    return _int_weight(q, scales.t().contiguous(), zeros, perm, spec, K, gs)


def awq_module(
    prefix: str,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    spec: ModuleSpec,
    rows: int,
    cols: int,
) -> IntWeight:
    order = torch.tensor(AWQ_ORDER, device=qweight.device)
    inverse = torch.argsort(order)  # position of column j within its word

    def unpack(words: torch.Tensor) -> torch.Tensor:  # [R, N/8] -> [R, N], columns in order
        q = unpack_along(words, 4, 1).view(words.shape[0], -1, 8)
        return q[:, :, inverse].reshape(words.shape[0], -1)

    gs = cols if spec.group_size == -1 else spec.group_size
    q = unpack(qweight).t()  # [N, K]
    zeros = unpack(qzeros).t().contiguous()  # [N, G]
    return _int_weight(q, scales.t().contiguous(), zeros, None, spec, cols, gs)


def _int_weight(
    q: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,  # None: symmetric, every zero point 2**(bits-1)
    perm: torch.Tensor | None,
    spec: ModuleSpec,
    K: int,
    gs: int,
) -> IntWeight:
    bits = spec.bits
    if zeros is None or bool((zeros + spec.zero_offset == 1 << (bits - 1)).all()):
        kept = None  # every zero point is 2**(bits-1): the kernels need not read them
    else:
        kept = zeros.contiguous().to(torch.uint8)
    cls = INT_CLASSES[bits]
    return cls(pack_values(q, bits), scales, kept, perm, K, gs, spec.zero_offset)


def _act_order(
    prefix: str, g_idx: torch.Tensor, gs: int, K: int, groups: int
) -> torch.Tensor | None:
    """None when g_idx is the plain k // group_size; else the permutation that sorts the
    columns by group (each group but the last must hold `gs` columns)."""
    g = g_idx.long()
    plain = torch.arange(K, device=g.device) // gs
    if bool((g == plain).all()):
        return None
    if bool(((g < 0) | (g >= groups)).any()):
        raise CheckpointError(
            f"tensor '{prefix}.g_idx' holds group ids outside [0, {groups}) "
            f"(in_features {K}, group_size {gs})"
        )
    perm = torch.sort(g, stable=True).indices
    if not bool((g[perm] == plain).all()):
        counts = torch.bincount(g, minlength=groups).tolist()
        raise CheckpointError(
            f"tensor '{prefix}.g_idx' gives groups of {counts[:4]}... columns; act-order "
            f"runs only with full groups of {gs} (the last one may be shorter)"
        )
    return perm.to(torch.int32)
