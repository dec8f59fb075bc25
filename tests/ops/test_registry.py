"""OpSet: names, origins, Triton fallbacks, and plugging in candidate files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evokernel.errors import TaskError
from evokernel.ops import reference
from evokernel.ops.candidates import load_candidate, seed_path
from evokernel.ops.registry import LINEAR_MAX_ROWS, OP_NAMES, OpSet

CANDIDATE = """
import torch

CALLS = []


def attention(q, k_cache, v_cache, seq_lens, scale):
    CALLS.append(q.shape)
    from evokernel.ops.reference import decode_attention
    return decode_attention(q, k_cache, v_cache, seq_lens, scale)


def linear(x, weight):
    CALLS.append(x.shape)
    return x @ weight.T
"""


@pytest.fixture
def candidate(tmp_path: Path) -> Path:
    path = tmp_path / "cand.py"
    path.write_text(CANDIDATE)
    return path


def test_torch_opset_names_every_op() -> None:
    ops = OpSet.torch()
    assert set(ops.origin) == set(OP_NAMES)
    assert all(label == "torch" for label in ops.origin.values())
    assert all(callable(ops[name]) for name in OP_NAMES)


def test_triton_opset_uses_kernels_and_task_seeds() -> None:
    ops = OpSet.triton()
    for name in ("rms_norm", "residual_add", "silu_mul", "qk_norm_rope_append"):
        assert ops.origin[name] == "triton"
    for name in ("linear", "decode_attention"):
        assert ops.origin[name] == str(seed_path(name))
    assert ops.origin["embed"] in ("triton", "triton+pdl")
    for name in ("prefill_attention", "logits", "sample"):
        assert ops.origin[name] == "torch"


def test_with_candidate_replaces_one_op(candidate: Path) -> None:
    ops = OpSet.torch().with_candidate("decode_attention", candidate)
    assert ops.origin["decode_attention"] == str(candidate)
    assert ops.origin["linear"] == "torch"
    q = torch.randn(1, 4, 8)
    kv = torch.randn(1, 2, 5, 8)
    lens = torch.tensor([3], dtype=torch.int32)
    out = ops.decode_attention(q, kv, kv, lens, 0.3)
    assert torch.equal(out, reference.decode_attention(q, kv, kv, lens, 0.3))
    calls = load_candidate(candidate, "attention").__globals__["CALLS"]
    assert calls == [q.shape]


def test_linear_candidate_serves_decode_rows_only(candidate: Path) -> None:
    ops = OpSet.torch().with_candidate("linear", candidate)
    calls = load_candidate(candidate, "linear").__globals__["CALLS"]
    calls.clear()
    w = torch.randn(6, 4)
    ops.linear(torch.randn(LINEAR_MAX_ROWS, 4), w)
    ops.linear(torch.randn(LINEAR_MAX_ROWS + 1, 4), w)  # prefill-sized: torch
    assert [tuple(s) for s in calls] == [(LINEAR_MAX_ROWS, 4)]


def test_candidate_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="no such file"):
        OpSet.torch().with_candidate("linear", tmp_path / "missing.py")
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise ValueError('bad\\nthing')\n")
    with pytest.raises(TaskError, match="import failed: ValueError: bad thing") as err:
        OpSet.torch().with_candidate("linear", broken)
    assert "\n" not in str(err.value)
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    with pytest.raises(TaskError, match="defines no function 'attention'"):
        OpSet.torch().with_candidate("decode_attention", empty)
    with pytest.raises(TaskError, match="unknown op"):
        OpSet.torch().with_candidate("softmax", empty)
    with pytest.raises(TaskError, match="unknown op set"):
        OpSet.named("cuda")


@pytest.mark.parametrize("B,hq,hkv,D", [(1, 16, 8, 128), (3, 5, 1, 64)])
def test_seed_attention_matches_reference(B: int, hq: int, hkv: int, D: int, device) -> None:
    g = torch.Generator().manual_seed(B + hq)
    S = 37
    q = torch.randn(B, hq, D, generator=g).to(device)
    k = torch.randn(B, hkv, S, D, generator=g).to(device)
    v = torch.randn(B, hkv, S, D, generator=g).to(device)
    lens = torch.tensor([S, 1, 20][:B], dtype=torch.int32, device=device)
    out = OpSet.triton().decode_attention(q, k, v, lens, D**-0.5)
    ref = reference.decode_attention(q, k, v, lens, D**-0.5)
    err = (out - ref).abs()
    assert err.max() < 1e-4, f"max err {err.max():.3e}, mean err {err.mean():.3e}"


def test_seed_linear_matches_reference(device: str) -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 200, generator=g).to(device)
    w = torch.randn(1000, 200, generator=g).to(device)
    err = (OpSet.triton().linear(x, w) - reference.linear(x, w)).abs()
    assert err.max() < 1e-4, f"max err {err.max():.3e}, mean err {err.mean():.3e}"


def test_engine_imports_leave_triton_unimported() -> None:
    """`import triton` fixes the Triton mode, so it must wait for device.prepare()."""
    code = (
        "import sys\n"
        "import evokernel.cli, evokernel.engine.generate, evokernel.engine.verify\n"
        "import evokernel.ops.registry, evokernel.ops.norm, evokernel.ops.rope\n"
        "import evokernel.ops.activation\n"
        "evokernel.cli.build_parser()\n"
        "assert 'triton' not in sys.modules, 'triton imported before device.prepare()'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
