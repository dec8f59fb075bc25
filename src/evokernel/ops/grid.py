"""Launch-size arithmetic for launchers that must not import triton at module level.

`import triton` defines triton.language's own jit helpers, so it may only happen after
`evokernel.device.prepare()` has chosen the Triton mode; launchers import kernels (and with
them triton) inside their functions, and use these helpers for grid and block sizes.
"""

from __future__ import annotations

from typing import Any

MAX_ROWS = 256  # rows (sequences) one fused decode call takes


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (n >= 1)."""
    return 1 << (n - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def row_warps(block: int) -> int:
    """Warps for a program that holds one row of `block` elements: 1 per 256, 1 to 8."""
    return min(max(block // 256, 1), 8)


def check_rows(x: Any, K: int) -> int:
    """Rows of a fused decode op's input x [M, K] (1..MAX_ROWS, rows contiguous)."""
    M = int(x.shape[0])
    assert x.dim() == 2 and x.shape[1] == K, (tuple(x.shape), K)
    assert 1 <= M <= MAX_ROWS, f"fused decode ops take 1..{MAX_ROWS} rows, got {M}"
    assert x.stride(1) == 1, "rows must be contiguous"
    return M
