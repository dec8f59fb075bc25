"""The packed projections the quantized kernels read: one layout per family of formats.

Every published layout is converted at load time into one of two row-major layouts, so that
a kernel program owning a block of output rows reads its rows' bytes contiguously, and so
that the engine's packing of q/k/v (and gate/up) rows into one projection is a plain
concatenation along the output dimension (`concat`):

`Fp8Weight` (FP8 block format)
    weight  float8_e4m3fn [N, K]
    scale   float32 [ceil(N / block_n), ceil(K / block_k)]   w = weight * scale[n // bn, k // bk]
  Parts whose row counts are all multiples of block_n keep their block scales; otherwise the
  scales are expanded to one row per output row (block_n = 1: 1/block_n more scale bytes).

`IntWeight` (GPTQ and AWQ, 4 or 8 bits), `Int4Weight` / `Int8Weight` by width
    qweight int32 [N, ceil(K / P)], P = 32 / bits values per word: word j of row n holds
            columns j*P .. j*P+P-1, column j*P+i in bits [i*bits, (i+1)*bits), unsigned
    scales  [N, G] (float16, bfloat16 or float32 as stored), G = ceil(K / group_size)
    zeros   uint8 [N, G], or None for symmetric weights (zero point 2**(bits-1))
    perm    int32 [K] or None: stored column c is input column perm[c] (GPTQ act-order,
            columns sorted by group so that each group is contiguous)
    w[n, perm[c]] = (q[n, c] - (zeros[n, c // group_size] + zero_offset)) * scales[n, c // gs]
  `zero_offset` is 1 for GPTQ v1 checkpoints (which store each zero point minus one) and 0
  otherwise.

`dequantize(dtype)` computes w in float32 (exact: small integers times a float16, bfloat16 or
float32 scale) and rounds once to `dtype`; it is the reference the kernels are tested
against, and the kernels compute the same float32 products.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from evokernel.model.weights import PackedWeight

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(eq=False)
class Fp8Weight(PackedWeight):
    format: ClassVar[str] = "fp8"
    weight: torch.Tensor  # float8_e4m3fn [N, K]
    scale: torch.Tensor  # float32 [ceil(N / block_n), ceil(K / block_k)]
    block_n: int
    block_k: int

    def __post_init__(self) -> None:
        N, K = self.weight.shape
        assert self.weight.dtype == FP8_DTYPE, self.weight.dtype
        assert self.scale.dtype == torch.float32, self.scale.dtype
        want = (cdiv(N, self.block_n), cdiv(K, self.block_k))
        assert tuple(self.scale.shape) == want, (tuple(self.scale.shape), want)

    @property
    def shape(self) -> tuple[int, int]:
        n, k = self.weight.shape
        return int(n), int(k)

    @property
    def label(self) -> str:
        return f"fp8-b{self.block_n}x{self.block_k}"

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"weight": self.weight, "scale": self.scale}

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        N, K = self.shape
        s = self.scale.repeat_interleave(self.block_n, 0)[:N]
        s = s.repeat_interleave(self.block_k, 1)[:, :K]
        return (self.weight.float() * s).to(dtype)

    def row_scales(self) -> torch.Tensor:
        """The scales with one row per output row [N, ceil(K / block_k)]."""
        return self.scale.repeat_interleave(self.block_n, 0)[: self.shape[0]].contiguous()

    def to(self, device: torch.device | str) -> Fp8Weight:
        return Fp8Weight(self.weight.to(device), self.scale.to(device), self.block_n, self.block_k)


@dataclass(eq=False)
class IntWeight(PackedWeight):
    bits: ClassVar[int] = 0
    qweight: torch.Tensor  # int32 [N, ceil(K / (32 // bits))]
    scales: torch.Tensor  # [N, G]
    zeros: torch.Tensor | None  # uint8 [N, G]; None: symmetric, zero point 2**(bits-1)
    perm: torch.Tensor | None  # int32 [K]
    in_features: int
    group_size: int  # columns per group (K for one group per row)
    zero_offset: int = 0

    def __post_init__(self) -> None:
        N = self.qweight.shape[0]
        K, gs = self.in_features, self.group_size
        assert self.qweight.dtype == torch.int32 and 32 % self.bits == 0
        assert self.qweight.shape[1] == cdiv(K, self.per_word), (self.qweight.shape, K)
        assert gs > 0 and gs % self.per_word == 0, gs
        assert tuple(self.scales.shape) == (N, cdiv(K, gs)), (self.scales.shape, N, K, gs)
        assert self.scales.dtype in (torch.float16, torch.bfloat16, torch.float32)
        if self.zeros is not None:
            assert self.zeros.dtype == torch.uint8 and self.zeros.shape == self.scales.shape
        if self.perm is not None:
            assert self.perm.dtype == torch.int32 and tuple(self.perm.shape) == (K,)

    @property
    def per_word(self) -> int:
        return 32 // self.bits

    @property
    def groups(self) -> int:
        return int(self.scales.shape[1])

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.qweight.shape[0]), self.in_features

    @property
    def label(self) -> str:
        gs = -1 if self.groups == 1 else self.group_size
        text = f"int{self.bits}-g{gs}"
        if self.zeros is not None:
            text += "-asym"
        if self.perm is not None:
            text += "-act"
        return text

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {"qweight": self.qweight, "scales": self.scales}
        if self.zeros is not None:
            out["zeros"] = self.zeros
        if self.perm is not None:
            out["perm"] = self.perm
        return out

    def values(self) -> torch.Tensor:
        """The unsigned integers [N, K] in stored column order (int32)."""
        shifts = torch.arange(0, 32, self.bits, device=self.qweight.device, dtype=torch.int32)
        q = (self.qweight.unsqueeze(-1) >> shifts) & ((1 << self.bits) - 1)
        return q.reshape(self.qweight.shape[0], -1)[:, : self.in_features]

    def zero_points(self) -> torch.Tensor:
        """The zero point of each (row, group), float32 [N, G]."""
        if self.zeros is None:
            return torch.full(
                self.scales.shape, float(1 << (self.bits - 1)), device=self.scales.device
            )
        return self.zeros.float() + self.zero_offset

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        group = torch.arange(self.in_features, device=self.qweight.device) // self.group_size
        z = self.zero_points()[:, group]
        w = (self.values().float() - z) * self.scales.float()[:, group]
        if self.perm is not None:
            out = torch.empty_like(w)
            out[:, self.perm.long()] = w
            w = out
        return w.to(dtype)

    def to(self, device: torch.device | str) -> IntWeight:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return type(self)(
            self.qweight.to(device), self.scales.to(device), move(self.zeros), move(self.perm),
            self.in_features, self.group_size, self.zero_offset,
        )  # fmt: skip


class Int4Weight(IntWeight):
    format: ClassVar[str] = "int4"
    bits: ClassVar[int] = 4


class Int8Weight(IntWeight):
    format: ClassVar[str] = "int8"
    bits: ClassVar[int] = 8


INT_CLASSES: dict[int, type[IntWeight]] = {4: Int4Weight, 8: Int8Weight}


def pack_values(q: torch.Tensor, bits: int) -> torch.Tensor:
    """Unsigned `bits`-bit integers [N, K] -> int32 words [N, ceil(K / (32 // bits))] in the
    `IntWeight` order (column j*P+i in bits [i*bits, (i+1)*bits) of word j)."""
    per = 32 // bits
    N, K = q.shape
    padded = torch.zeros((N, cdiv(K, per) * per), dtype=torch.int64, device=q.device)
    padded[:, :K] = q.to(torch.int64)
    shifts = torch.arange(0, 32, bits, device=q.device, dtype=torch.int64)
    words = (padded.view(N, -1, per) << shifts).sum(-1)  # disjoint bits: the sum is an OR
    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)


def concat(parts: list[PackedWeight]) -> PackedWeight:
    """Row blocks of one projection (q, k, v or gate, up) as one packed weight [sum N, K]."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    if isinstance(first, Fp8Weight):
        fps = [p for p in parts if isinstance(p, Fp8Weight)]
        assert len(fps) == len(parts), "parts of one projection share a format"
        assert all(p.block_k == first.block_k for p in fps), "parts share a block size"
        if all(p.block_n == first.block_n and p.shape[0] % p.block_n == 0 for p in fps):
            weight = torch.cat([p.weight for p in fps])
            return Fp8Weight(
                weight, torch.cat([p.scale for p in fps]), first.block_n, first.block_k
            )
        weight = torch.cat([p.weight for p in fps])
        scale = torch.cat([p.row_scales() for p in fps])
        return Fp8Weight(weight, scale, 1, first.block_k)
    assert isinstance(first, IntWeight), type(first)
    ints = [p for p in parts if isinstance(p, IntWeight)]
    assert len(ints) == len(parts) and all(type(p) is type(first) for p in ints)
    assert all(p.group_size == first.group_size and p.in_features == first.in_features
               and p.zero_offset == first.zero_offset for p in ints)  # fmt: skip
    if first.perm is not None:
        assert all(p.perm is not None and torch.equal(p.perm, first.perm) for p in ints)
    else:
        assert all(p.perm is None for p in ints), "parts share one column order"
    dtypes = {p.scales.dtype for p in ints}
    sdt = first.scales.dtype if len(dtypes) == 1 else torch.float32
    scales = torch.cat([p.scales.to(sdt) for p in ints])
    zeros = None
    if any(p.zeros is not None for p in ints):
        zeros = torch.cat([_stored_zeros(p) for p in ints])
    qweight = torch.cat([p.qweight for p in ints])
    return type(first)(qweight, scales, zeros, first.perm, first.in_features,
                       first.group_size, first.zero_offset)  # fmt: skip


def _stored_zeros(p: IntWeight) -> torch.Tensor:
    if p.zeros is not None:
        return p.zeros
    # The symmetric zero point, as this weight stores zero points (minus the offset).
    value = (1 << (p.bits - 1)) - p.zero_offset
    return torch.full(p.scales.shape, value, dtype=torch.uint8, device=p.scales.device)
