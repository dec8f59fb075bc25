"""Launchers of the fused decode-step kernels (kernels/gemv.py, kernels/attention.py).

Same signatures and results as the fused ops of ops/compose.py (`norm_linear`,
`linear_residual`, `norm_gate_up_silu`, `decode_attention_qkv`, `norm_logits`, `greedy_head`),
plus a keyword `tuning` (a `DecodeTuning`; the OpSet binds it): launch sizes and whether to use
programmatic dependent launch (CUDA sm_90+ only). Rows per call: up to `MAX_ROWS` (decode
batch); the engine's prefill keeps the unfused ops.

Attention with the q/k prep fused (`decode_attention_qkv`), bounded by <= 256 positions, runs
as the CUDA C++ one-pass kernel where it applies (`tuning.cuda_direct`, ops/attention_cuda.py:
head_dim 128, 2 query heads per kv head, bf16/fp16, sm_90+, nvcc present): one program per
(sequence, kv head), its warps each on 16 cache rows, merged in shared memory, so no second
launch; elsewhere, and for a forced `split`, the Triton kernels below.

Launch sizes: a GEMV program owns BLOCK_N weight rows and the whole K, about
`tuning.tile_bytes` of weights (in registers, loaded before the PDL wait), with BLOCK_N lowered
until there are at least as many programs as SMs. Attention splits the context into chunks
of at least `tuning.min_chunk` positions, as many as B * Hkv * SPLIT programs fit on the GPU
(`attention_split`): where a chunk is one tile, each program's whole share of the cache is
loaded before its PDL wait, and after the wait only the new token's row and the arithmetic
remain; launches bounded by the first graph bucket use 16-row tiles and, unless
`tuning.short_mma`, run the attention's products on the CUDA cores. Chunks are merged by a
second launch (`attention_combine_kernel`), or, with `tuning.ticket_combine`, inside the
attention launch by the last program of each (sequence, kv head) to finish
(kernels/attention.py), so a split costs no second launch; the counters it needs are one
zeroed int32 buffer per device (`attention_tickets`), kept for the process's life because
captured graphs hold its address. The greedy head's argmax needs no pass over per-program
partials: the lm_head programs fold theirs into one int64 key per row by an atomic max (a kept
zeroed buffer too, `argmax_keys`), and a one-program kernel turns the keys into tokens. All
of it depends on shapes and host-side bounds only: no host sync, graph-capturable.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from evokernel.ops import attention_cuda
from evokernel.ops.grid import cdiv, next_pow2

MAX_ROWS = 8
ARGMAX_MAX_VOCAB = 1 << 24  # greedy_head's argmax keys hold the id in 24 bits


@dataclass(frozen=True)
class DecodeTuning:
    """Launch choices of the fused decode kernels (none changes a result)."""

    pdl: bool = False  # programmatic dependent launch (sm_90+)
    tile_bytes: int = 32 * 1024  # weight bytes per GEMV program (a power of two)
    gemv_warps: int = 0  # 0: 8 for tiles of >= 16K elements, else 4
    attn_block_n: int = 64  # positions per attention tile
    short_block_n: int = 16  # if set, the tile for bounds <= short_max (the first graph bucket)
    short_warps: int = 0  # if set, the attention's warps for bounds <= short_max
    short_mma: bool = False  # bounds <= short_max: tensor-core products (else CUDA cores)
    short_max: int = 256
    attn_warps: int = 4
    combine_warps: int = 1  # the second kernel that merges the split's chunks
    direct_max: int = 16  # up to this bound one program per kv head (no split)
    ticket_combine: bool = False  # split chunks merged in the attention launch, not a second
    # Fused attention bounded by <= 256 positions: the CUDA C++ one-pass kernel where it
    # applies (ops/attention_cuda.py: a warp per 16 cache rows, no split, no combine launch)
    cuda_direct: bool = True
    min_chunk: int = 16  # beyond it, positions per attention program at the least
    attn_programs_per_sm: int = 2  # B * Hkv * SPLIT up to this many per SM
    max_split: int = 64

    def __post_init__(self) -> None:
        for name in ("tile_bytes", "attn_block_n", "direct_max", "min_chunk", "max_split",
                     "short_max"):  # fmt: skip
            value = getattr(self, name)
            assert value >= 1 and value & (value - 1) == 0, f"{name} must be a power of two"
        assert self.attn_block_n >= 16 and self.gemv_warps in (0, 1, 2, 4, 8, 16)
        short = self.short_block_n
        assert short == 0 or (short >= 16 and short & (short - 1) == 0), "short_block_n"
        assert self.short_warps in (0, 1, 2, 4, 8) and self.attn_warps in (1, 2, 4, 8)
        assert self.combine_warps in (1, 2, 4, 8)

    def attention_block_n(self, bound: int) -> int:
        """Positions per attention tile for a launch bounded by `bound`."""
        if self.short_block_n and bound <= self.short_max:
            return self.short_block_n
        return self.attn_block_n

    def attention_mma(self, bound: int) -> bool:
        """Whether a launch bounded by `bound` runs the attention's products on tensor cores."""
        return self.short_mma or bound > self.short_max

    def attention_warps(self, bound: int) -> int:
        """Warps per attention program for a launch bounded by `bound`."""
        if self.short_warps and bound <= self.short_max:
            return self.short_warps
        return self.attn_warps


DEFAULT = DecodeTuning()


@functools.lru_cache(maxsize=8)
def sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4  # the interpreter: few programs keep CPU tests fast
    return int(torch.cuda.get_device_properties(device).multi_processor_count)


def gemv_block_n(
    N: int, K: int, itemsize: int, device: torch.device, tuning: DecodeTuning, tiles: int = 1
) -> int:
    """Rows per program: ~tile_bytes of weights (`tiles` weight tiles per row), >= 1 wave."""
    per_row = next_pow2(K) * itemsize * tiles
    block = max(1, min(next_pow2(N), tuning.tile_bytes // per_row))
    block = 1 << (block.bit_length() - 1)  # a power of two
    while block > 1 and cdiv(N, block) < sm_count(device):
        block //= 2
    return block


def _warps(block_n: int, block_k: int, tuning: DecodeTuning) -> int:
    if tuning.gemv_warps:
        return tuning.gemv_warps
    return 8 if block_n * block_k >= 16384 else 4


def _check_rows(x: torch.Tensor, K: int) -> int:
    M = x.shape[0]
    assert x.dim() == 2 and x.shape[1] == K, (tuple(x.shape), K)
    assert 1 <= M <= MAX_ROWS, f"fused decode ops take 1..{MAX_ROWS} rows, got {M}"
    assert x.stride(1) == 1, "rows must be contiguous"
    return M


def norm_linear(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> torch.Tensor:
    from evokernel.kernels.gemv import norm_gemv_kernel

    N, K = weight.shape
    M = _check_rows(x, K)
    assert norm_weight.shape == (K,) and weight.stride(1) == 1
    assert x.dtype == weight.dtype == norm_weight.dtype, (x.dtype, weight.dtype)
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    block_n, block_k = gemv_block_n(N, K, weight.element_size(), x.device, tuning), next_pow2(K)
    norm_gemv_kernel[(cdiv(N, block_n),)](
        x, norm_weight, weight, y, M, N, x.stride(0), weight.stride(0), y.stride(0),
        eps, K=K, BLOCK_M=M, BLOCK_N=block_n, BLOCK_K=block_k, NORM=True,
        PDL=tuning.pdl,
        num_warps=_warps(block_n, block_k, tuning), launch_pdl=tuning.pdl,
    )  # fmt: skip
    return y


def linear_residual(
    x: torch.Tensor,
    weight: torch.Tensor,
    residual: torch.Tensor,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> torch.Tensor:
    from evokernel.kernels.gemv import gemv_add_kernel

    N, K = weight.shape
    M = _check_rows(x, K)
    assert residual.shape == (M, N) and residual.stride(1) == 1 and weight.stride(1) == 1
    assert x.dtype == weight.dtype == residual.dtype, (x.dtype, weight.dtype, residual.dtype)
    block_n, block_k = gemv_block_n(N, K, weight.element_size(), x.device, tuning), next_pow2(K)
    gemv_add_kernel[(cdiv(N, block_n),)](
        x, weight, residual, M, N, x.stride(0), weight.stride(0), residual.stride(0),
        K=K, BLOCK_M=M, BLOCK_N=block_n, BLOCK_K=block_k, PDL=tuning.pdl,
        num_warps=_warps(block_n, block_k, tuning), launch_pdl=tuning.pdl,
    )  # fmt: skip
    return residual


def norm_gate_up_silu(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    gate_up: torch.Tensor,
    eps: float,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> torch.Tensor:
    from evokernel.kernels.gemv import norm_gate_up_kernel

    two_i, K = gate_up.shape
    M = _check_rows(x, K)
    assert two_i % 2 == 0 and norm_weight.shape == (K,) and gate_up.stride(1) == 1
    assert x.dtype == gate_up.dtype == norm_weight.dtype, (x.dtype, gate_up.dtype)
    inter = two_i // 2
    act = torch.empty((M, inter), device=x.device, dtype=x.dtype)
    block_n = gemv_block_n(inter, K, gate_up.element_size(), x.device, tuning, tiles=2)
    block_k = next_pow2(K)
    norm_gate_up_kernel[(cdiv(inter, block_n),)](
        x, norm_weight, gate_up, act, M, inter, x.stride(0), gate_up.stride(0),
        act.stride(0), eps, K=K, BLOCK_M=M, BLOCK_N=block_n, BLOCK_K=block_k,
        PDL=tuning.pdl,
        num_warps=_warps(2 * block_n, block_k, tuning), launch_pdl=tuning.pdl,
    )  # fmt: skip
    return act


_KEPT: dict[tuple[str, str, int | None], list[torch.Tensor]] = {}


def _kept_zeros(purpose: str, device: torch.device, n: int, dtype: torch.dtype) -> torch.Tensor:
    """At least `n` zeros of `dtype` on `device` for `purpose`, which every launch that uses
    them leaves zero again. Every buffer handed out stays alive for the process's life: a
    captured CUDA graph holds its address. A larger request allocates a larger buffer
    (outside graph capture, do it once eagerly first, as warm-up does). Two launches sharing
    a buffer must not run concurrently."""
    index = device.index
    if device.type == "cuda" and index is None:
        index = torch.cuda.current_device()
    kept = _KEPT.setdefault((purpose, device.type, index), [])
    if not kept or kept[-1].numel() < n:
        kept.append(torch.zeros(max(n, 256), dtype=dtype, device=device))
    return kept[-1]


def attention_tickets(device: torch.device, n: int) -> torch.Tensor:
    """At least `n` int32 counters, zero between attention launches (`_kept_zeros`)."""
    return _kept_zeros("tickets", device, n, torch.int32)


def argmax_keys(device: torch.device, n: int) -> torch.Tensor:
    """At least `n` int64 argmax keys, zero between greedy heads (`_kept_zeros`)."""
    return _kept_zeros("argmax", device, n, torch.int64)


def attention_split(
    max_len: int, programs_per_split: int, device: torch.device, tuning: DecodeTuning = DEFAULT
) -> int:
    """Chunks per sequence for a bound `max_len` on seq_lens: 1 up to `tuning.direct_max` (one
    pass); beyond, chunks of at least `min_chunk` positions, their count rounded up to a power
    of two (so that a chunk is one tile where the programs allow) but at most
    `attn_programs_per_sm` programs per SM in all (programs_per_split = B * Hkv) and
    `max_split`. The chunk size follows each sequence's own length at run time, so short
    sequences under a long bound leave trailing chunks empty."""
    if max_len <= tuning.direct_max:
        return 1
    want = next_pow2(cdiv(max_len, tuning.min_chunk))
    cap = max(1, tuning.attn_programs_per_sm * sm_count(device) // max(1, programs_per_split))
    cap = 1 << (min(cap, tuning.max_split).bit_length() - 1)
    return min(want, cap)


def decode_attention_qkv(
    qkv: torch.Tensor,
    q_norm: torch.Tensor,
    k_norm: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    eps: float,
    max_len: int,
    *,
    tuning: DecodeTuning = DEFAULT,
    split: int | None = None,
) -> torch.Tensor:
    B = qkv.shape[0]
    hkv, D = k_cache.shape[1], k_cache.shape[3]
    hq = qkv.shape[1] // D - 2 * hkv
    assert qkv.dim() == 2 and qkv.shape[1] == (hq + 2 * hkv) * D and hq % hkv == 0, qkv.shape
    assert qkv.is_contiguous() and q_norm.shape == (D,) and k_norm.shape == (D,)
    assert cos.shape == sin.shape and cos.shape[1] == D // 2 and cos.dtype == torch.float32
    assert positions.shape == (B,) and positions.dtype == torch.int32
    return _attention(
        qkv, q_norm, k_norm, cos, sin, positions, k_cache, v_cache, seq_lens, scale, eps,
        max_len, hq, qkv.stride(0), D, fused=True, tuning=tuning, split=split,
    )  # fmt: skip


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    max_len: int | None = None,
    *,
    tuning: DecodeTuning = DEFAULT,
    split: int | None = None,
) -> torch.Tensor:
    """The `gqa_decode_attention` interface on the same kernel (q already normed and rotated);
    `max_len` defaults to the cache length."""
    B, hq, D = q.shape
    assert q.stride(2) == 1, "q's last dim must be contiguous"
    out = _attention(
        q, q, q, q, q, seq_lens, k_cache, v_cache, seq_lens, scale, 0.0,
        k_cache.shape[2] if max_len is None else max_len, hq, q.stride(0), q.stride(1),
        fused=False, tuning=tuning, split=split,
    )  # fmt: skip
    return out.view(B, hq, D)


def _attention(
    q, q_norm, k_norm, cos, sin, positions, k_cache, v_cache, seq_lens, scale, eps, max_len,
    hq, stride_qb, stride_qh, *, fused: bool, tuning: DecodeTuning, split: int | None,
) -> torch.Tensor:  # fmt: skip
    """`split` None: `attention_split` of the bound; a number forces the chunk count."""
    from evokernel.kernels.attention import attention_combine_kernel, attention_kernel

    B = seq_lens.shape[0]
    cache_b, hkv, S, D = k_cache.shape
    assert cache_b == B and v_cache.shape == k_cache.shape, (tuple(k_cache.shape), B)
    assert D >= 32 and next_pow2(D) == D, f"head_dim {D} must be a power of two >= 32"
    assert k_cache.stride(3) == 1 and v_cache.stride(3) == 1, "cache rows must be contiguous"
    assert k_cache.dtype == v_cache.dtype == q.dtype, (k_cache.dtype, q.dtype)
    assert seq_lens.shape == (B,) and seq_lens.dtype == torch.int32
    group = hq // hkv
    bound = min(max_len, S)
    out = torch.empty((B, hq, D), device=q.device, dtype=q.dtype)
    if (
        fused and split is None and tuning.cuda_direct
        and attention_cuda.applies(q, k_cache, hq, bound)
    ):  # fmt: skip
        attention_cuda.launch(q, q_norm, k_norm, cos, sin, positions, k_cache, v_cache,
                              seq_lens, scale, eps, out, bound, tuning.pdl)  # fmt: skip
        return out.view(B, hq * D)
    if split is None:
        split = attention_split(bound, B * hkv, q.device, tuning)
    ticket = split > 1 and tuning.ticket_combine
    mma = tuning.attention_mma(bound)
    if split == 1:
        part = lse = out
    else:
        part = torch.empty((B * hq, split, D), device=q.device, dtype=torch.float32)
        lse = torch.empty((B * hq, split), device=q.device, dtype=torch.float32)
    tickets = attention_tickets(q.device, B * hkv) if ticket else lse
    attention_kernel[(B * hkv, split)](
        q, q_norm, k_norm, cos, sin, positions, seq_lens, k_cache, v_cache, out, part, lse,
        tickets, scale, eps, split, hkv, S, cos.shape[0] if fused else 0, stride_qb, stride_qh,
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1),
        GROUP=group, D=D, BLOCK_G=max(16, next_pow2(group)) if mma else next_pow2(group),
        BLOCK_N=tuning.attention_block_n(bound), FUSED=fused, DIRECT=split == 1,
        TICKET=ticket, BLOCK_S=next_pow2(split), BLOCK_R=next_pow2(group),
        IEEE=q.dtype == torch.float32, MMA=mma, PDL=tuning.pdl,
        num_warps=tuning.attention_warps(bound), launch_pdl=tuning.pdl,
    )  # fmt: skip
    if split > 1 and not ticket:
        attention_combine_kernel[(B * hq,)](
            part, lse, out, hq, split, out.stride(0), out.stride(1),
            D=D, BLOCK_S=next_pow2(split), PDL=tuning.pdl, num_warps=tuning.combine_warps,
            launch_pdl=tuning.pdl,
        )  # fmt: skip
    return out.view(B, hq * D)


def _head(
    x: torch.Tensor, norm_weight: torch.Tensor, lm_head: torch.Tensor, eps: float,
    logits: torch.Tensor | None, keys: torch.Tensor | None, tuning: DecodeTuning,
) -> None:  # fmt: skip
    """The normed lm_head GEMV: into `logits` [M, V] if given, and each row's argmax key
    (kernels/gemv.py `argmax_key`) atomically maxed into `keys` [M] if given."""
    from evokernel.kernels.gemv import norm_head_kernel

    V, K = lm_head.shape
    M = _check_rows(x, K)
    assert norm_weight.shape == (K,) and lm_head.stride(1) == 1 and x.dtype == lm_head.dtype
    block_n, block_k = gemv_block_n(V, K, lm_head.element_size(), x.device, tuning), next_pow2(K)
    out = logits if logits is not None else x  # an unused pointer argument
    norm_head_kernel[(cdiv(V, block_n),)](
        x, norm_weight, lm_head, keys if keys is not None else out, out, M, V,
        x.stride(0), lm_head.stride(0), out.stride(0), eps,
        K=K, BLOCK_M=M, BLOCK_N=block_n, BLOCK_K=block_k, WRITE_LOGITS=logits is not None,
        ARGMAX=keys is not None, PDL=tuning.pdl, num_warps=_warps(block_n, block_k, tuning),
        launch_pdl=tuning.pdl,
    )  # fmt: skip


def norm_logits(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    lm_head: torch.Tensor,
    eps: float,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> torch.Tensor:
    logits = torch.empty((x.shape[0], lm_head.shape[0]), device=x.device, dtype=torch.float32)
    _head(x, norm_weight, lm_head, eps, logits, None, tuning)
    return logits


def greedy_head(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    lm_head: torch.Tensor,
    eps: float,
    tokens: torch.Tensor,
    positions: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> None:
    """Two launches: the head folds each program's max/argmax into one int64 key per row (an
    atomic max on a kept zeroed buffer, `argmax_keys`), then one small program reads the keys,
    writes the tokens, zeroes the keys and advances positions and seq_lens. Two greedy heads
    must not run concurrently on one device."""
    from evokernel.kernels.gemv import argmax_finish_kernel

    M = x.shape[0]
    assert tokens.shape == (M,) and tokens.dtype == torch.int64
    assert positions.shape == (M,) and seq_lens.shape == (M,)
    V = lm_head.shape[0]
    assert V <= ARGMAX_MAX_VOCAB, f"greedy argmax takes up to {ARGMAX_MAX_VOCAB} ids, got {V}"
    keys = argmax_keys(x.device, MAX_ROWS)
    _head(x, norm_weight, lm_head, eps, None, keys, tuning)
    argmax_finish_kernel[(1,)](
        keys, tokens, positions, seq_lens, M,
        BLOCK_M=next_pow2(M), ADVANCE=True, PDL=tuning.pdl, num_warps=1, launch_pdl=tuning.pdl,
    )  # fmt: skip
