"""The sync-cost probes compute what they claim (under the interpreter; the persistent barrier
kernel and the timing itself need a GPU: they run in scripts/gpu_check.sh's `sync` section)."""

from __future__ import annotations

import pytest
import torch

from evokernel.bench import sync_costs
from evokernel.kernels.sync_probes import atomic_add_kernel, chain_kernel, store_rows_kernel

N = 100  # not a multiple of any block


@pytest.mark.parametrize("programs", [1, 7, 32])
def test_a_chain_stage_adds_one_to_every_value(programs: int) -> None:
    block = 1 << (max(1, -(-N // programs)) - 1).bit_length()
    src = torch.arange(N, dtype=torch.float32)
    dst = torch.full((N,), -5.0)
    chain_kernel[(-(-N // block),)](src, dst, N, BLOCK=block, BLOCK_N=128, PDL=False)
    assert torch.equal(dst, src + 1)


def test_a_nan_in_the_input_is_seen_by_the_reduction() -> None:
    src = torch.zeros(N)
    src[N - 1] = float("nan")
    dst = torch.zeros(N)
    chain_kernel[(4,)](src, dst, N, BLOCK=32, BLOCK_N=128, PDL=False)
    assert torch.equal(dst[:10], torch.full((10,), 2.0))  # the reduction is not dead code


def test_atomic_adds_sum_over_programs_and_row_stores_fill_rows() -> None:
    acc = torch.zeros(N)
    atomic_add_kernel[(9,)](acc, N, BLOCK_N=128)
    assert torch.equal(acc, torch.full((N,), 9.0))
    rows = torch.zeros(5, N)
    store_rows_kernel[(5,)](rows, N, BLOCK_N=128)
    assert torch.equal(rows, torch.ones(5, N))


def test_the_bench_refuses_a_cpu_and_bad_arguments(capsys) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert sync_costs.main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sync_costs.main(["--stages", "0"])


def test_the_table_names_every_figure() -> None:
    doc = {
        "gpu": "X",
        "sms": 132,
        "stages": 140,
        "vector_floats": 1024,
        "per_stage_us": {"launch P=128": 1.5, "barrier P=128": 0.7},
        "atomics": {"96": {"atomic_add_us": 3.0, "store_rows_us": 2.0}},
    }
    text = "\n".join(sync_costs.table(doc))
    assert "launch P=128" in text and "barrier P=128" in text and "atomic add" in text
