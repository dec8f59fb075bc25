"""`decode_stages`' bad input is refused before any GPU work (the timing itself needs a GPU:
scripts/gpu_check.sh's `stages` section)."""

from __future__ import annotations

import pytest

from evokernel.bench import decode_stages


@pytest.mark.parametrize(
    "args",
    [
        ["--positions", "100", "--stage-position", "33", "--cache", "120"],  # 100 + 21 > 120
        ["--positions", "1,33", "--cache", "128"],  # the stage position 1024 does not fit
    ],
)
def test_a_cache_too_short_for_the_steps_is_refused(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert decode_stages.main(["--model", "unused", *args]) == 2
    assert "--cache must hold every position" in capsys.readouterr().err


def test_the_int4_triton_variant_keeps_every_4_bit_op_off_the_cuda_kernel() -> None:
    from evokernel.ops import quant

    entries = decode_stages.VARIANTS["int4-triton"]["quant"]
    assert {e[1] for e in entries} == set(quant.OPS)  # the head included
    assert all(e[0] == "int4" and e[3] in quant.DEQ_CODES for e in entries)  # no "cuda"
