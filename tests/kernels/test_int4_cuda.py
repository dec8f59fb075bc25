"""The CUDA C++ 4-bit decode GEMV (ops/quant_cuda.py, kernels/cuda/int4_gemv.cu) vs the float32
torch references and the Triton kernels, on the shapes it serves: one activation row, K and the
group size multiples of 128, N and I odd (row groups cut short), groups of 128 / 256 / one per
row, fewer chunks than warps, symmetric and asymmetric zero points (GPTQ v1's offset too),
float16 / bfloat16 / float32 scales, act-order gathered by the launcher, every launch setting,
inside a CUDA graph with PDL; the head's logits and greedy argmax (ties to the lower row).
Where it does not serve (a CPU, several rows, a K or group size not a multiple of 128) a
"cuda" choice runs the Triton kernels. Running it needs a
GPU; building it needs nvcc (tests/ops/test_cuda_build.py)."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import assert_close
from quant_weights import (
    EPS,
    int_weight,
    ref_gate_up,
    ref_linear,
    ref_linear_residual,
    ref_logits,
    ref_norm_linear,
)

from evokernel.ops import quant, quant_cuda
from evokernel.ops.tuning import DEFAULT, DecodeTuning

CUDA = DEFAULT._replace(pdl=True)

# (N, K, group, zeros, zero offset, scale dtype)
CASES = [
    (37, 128, 128, True, 0, torch.float16),
    (130, 2560, 128, False, 0, torch.bfloat16),
    (4099, 1024, 256, True, 1, torch.float32),
    (258, 4096, -1, True, 0, torch.float16),
    (1001, 12288, 128, False, 0, torch.float16),
    (24, 384, -1, False, 0, torch.bfloat16),
]
IDS = [f"{c[0]}x{c[1]}-g{c[2]}{'-z' if c[3] else ''}{'-v1' if c[4] else ''}" for c in CASES]


def _weight(N, K, group, zeros, offset, sdtype, device, perm=False):
    g = torch.Generator().manual_seed(N + K + group)
    return int_weight(N, K, 4, group, g, zeros=zeros, perm=perm, zero_offset=offset,
                      scale_dtype=sdtype, device=device)  # fmt: skip


def _inputs(K, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(1, K, generator=g) * 3).to(device, dtype)
    norm_w = (1 + 0.2 * torch.randn(K, generator=g)).to(device, dtype)
    return x, norm_w


def _force_cuda(monkeypatch) -> None:
    monkeypatch.setattr(quant, "DEQUANT", "cuda")


def test_the_cuda_choice_falls_back_to_triton_where_it_does_not_apply(monkeypatch) -> None:
    w = _weight(40, 128, 128, True, 0, torch.float16, "cpu")
    x, norm_w = _inputs(128, torch.float32, "cpu")
    assert not quant_cuda.applies(x, w)  # not a CUDA device
    assert quant.cuda_launch(w, "norm_linear", x, CUDA) is None
    _force_cuda(monkeypatch)
    assert quant.choice(w, "norm_linear")[0] == "cuda"
    lay = quant.layout(w, "norm_linear")
    assert lay.meta["DEQ"] == quant.DEQ_CODES[quant.fallback(w, "norm_linear")[0]]
    assert_close(quant.norm_linear(x, norm_w, w, EPS), ref_norm_linear(x, norm_w, w), "y")


def test_the_declared_space_offers_cuda_only_where_the_kernel_is_written_for() -> None:
    g = torch.Generator().manual_seed(1)
    assert "cuda" in quant.modes(int_weight(64, 2048, 4, 128, g), "gate_up")
    assert "cuda" in quant.modes(int_weight(64, 1024, 4, 128, g), "norm_linear")
    assert "cuda" in quant.modes(int_weight(64, 1024, 4, 128, g), "head")
    assert "cuda" not in quant.modes(int_weight(64, 1000, 4, 40, g), "norm_linear")  # K % 128
    assert "cuda" not in quant.modes(int_weight(64, 1024, 4, 64, g), "norm_linear")  # group
    assert "cuda" not in quant.modes(int_weight(64, 1536, 4, 384, g), "norm_linear")  # 3 chunks
    assert "cuda" in quant.modes(int_weight(64, 1536, 4, -1, g), "norm_linear")  # one group
    assert "cuda" not in quant.modes(int_weight(64, 1024, 8, 128, g), "norm_linear")
    assert not quant_cuda.shape_fits(int_weight(64, 1024, 8, 128, g))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_fused_ops_match_the_references_and_triton(case, dtype, monkeypatch) -> None:
    N, K = case[0], case[1]
    w = _weight(*case, "cuda")
    x, norm_w = _inputs(K, dtype, "cuda", seed=N)
    assert quant_cuda.applies(x, w), quant_cuda.library(x.device)
    bias = (torch.randn(N, generator=torch.Generator().manual_seed(3))).to("cuda", dtype)
    res = (torch.randn(1, N, generator=torch.Generator().manual_seed(4)) * 4).to("cuda", dtype)
    gu = _weight(2 * (N // 2 | 1), K, *case[2:], "cuda")  # I odd
    monkeypatch.setattr(quant, "DEQUANT", "interleave")
    triton = (quant.norm_linear(x, norm_w, w, EPS, bias, tuning=CUDA),
              quant.norm_gate_up_silu(x, norm_w, gu, EPS, tuning=CUDA))  # fmt: skip
    _force_cuda(monkeypatch)
    assert quant.cuda_launch(w, "norm_linear", x, CUDA) is not None
    unaligned = torch.empty(K + 1, device="cuda", dtype=dtype)[1:].copy_(norm_w)
    assert not quant_cuda.applies(x, w, unaligned)  # such a norm weight keeps Triton
    got = quant.norm_linear(x, unaligned, w, EPS, tuning=CUDA)
    assert_close(got, ref_norm_linear(x, norm_w, w), "norm_linear, unaligned norm weight")
    got = quant.norm_linear(x, norm_w, w, EPS, tuning=CUDA)
    assert_close(got, ref_norm_linear(x, norm_w, w), "norm_linear")
    got = quant.norm_linear(x, norm_w, w, EPS, bias, tuning=CUDA)
    assert_close(got, ref_norm_linear(x, norm_w, w, bias=bias), "norm_linear + bias")
    assert_close(got, triton[0], "norm_linear + bias vs triton")
    assert_close(quant.linear(x, w), ref_linear(x, w), "linear")
    out = res.clone()
    assert quant.linear_residual(x, w, out, tuning=CUDA) is out
    assert_close(out, ref_linear_residual(x, w, res.clone()), "residual")
    act = quant.norm_gate_up_silu(x, norm_w, gu, EPS, tuning=CUDA)
    assert_close(act, ref_gate_up(x, norm_w, gu), "gate_up")
    assert_close(act, triton[1], "gate_up vs triton")


@pytest.mark.gpu
@pytest.mark.parametrize(
    "settings",
    [(4, 2, 0), (8, 3, 1), (8, 2, 0), (2, 3, 1), (1, 3, 0), (3, 2, 0), (16, 2, 0), (12, 3, 1)],
)
def test_every_launch_setting_gives_the_same_outputs(settings) -> None:
    launch = quant_cuda.Launch(*settings)
    w = _weight(517, 2048, 128, True, 0, torch.float16, "cuda")
    gu = _weight(2 * 301, 2048, 128, False, 0, torch.bfloat16, "cuda")
    x, norm_w = _inputs(2048, torch.bfloat16, "cuda")
    y = torch.empty(1, 517, device="cuda", dtype=torch.bfloat16)
    quant_cuda.launch(quant_cuda.OP_LINEAR, x, w, y, norm_weight=norm_w, eps=EPS, settings=launch)
    assert_close(y, ref_norm_linear(x, norm_w, w), f"linear {settings}")
    res = torch.randn(1, 517, device="cuda").to(torch.bfloat16)
    want = ref_linear_residual(x, w, res.clone())
    quant_cuda.launch(quant_cuda.OP_RESIDUAL, x, w, res, settings=launch)
    assert_close(res, want, f"residual {settings}")
    act = torch.empty(1, 301, device="cuda", dtype=torch.bfloat16)
    quant_cuda.launch(quant_cuda.OP_GATE_UP, x, gu, act, norm_weight=norm_w, eps=EPS,
                      settings=launch)  # fmt: skip
    assert_close(act, ref_gate_up(x, norm_w, gu), f"gate_up {settings}")


def _argmax_row(key: torch.Tensor) -> int:
    return 0xFFFFFF - int(key) % (1 << 24)  # kernels/gemv.py `argmax_key`'s low 24 bits


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("V,K,group", [(1001, 1024, 128), (20011, 4096, 128), (4099, 2048, -1)])
def test_the_head_gives_the_logits_and_their_greedy_argmax(V, K, group, dtype, monkeypatch):
    w = _weight(V, K, group, True, 0, torch.float16, "cuda")
    x, norm_w = _inputs(K, dtype, "cuda", seed=V)
    # rows 7 and V - 3 copies of the largest logit's row, scaled above every other: the
    # argmax is the lower of the two
    first = ref_logits(x, norm_w, w)[0]
    src = int(first.abs().argmax())
    sign = 1.0 if float(first[src]) > 0 else -1.0
    for r in (7, V - 3):
        w.qweight[r] = w.qweight[src]
        w.scales[r] = w.scales[src] * 4 * sign
        w.zeros[r] = w.zeros[src]
    _force_cuda(monkeypatch)
    assert quant.cuda_launch(w, "head", x, CUDA) is not None
    logits = quant.norm_logits(x, norm_w, w, EPS, tuning=CUDA)
    assert logits.dtype == torch.float32
    assert_close(logits.to(dtype), ref_logits(x, norm_w, w).to(dtype), "head logits")
    keys = torch.zeros(3, dtype=torch.int64, device="cuda")
    quant.head_keys(x, norm_w, w, EPS, keys, tuning=CUDA)
    assert logits[0, 7] == logits[0, V - 3] == logits.max()
    assert _argmax_row(keys[0]) == 7 and int(keys[1]) == int(keys[2]) == 0
    # a symmetric weight, nothing planted: the argmax of its own logits, the same every launch
    w = _weight(V, K, group, False, 0, torch.bfloat16, "cuda")
    logits = quant.norm_logits(x, norm_w, w, EPS, tuning=CUDA)
    assert_close(logits.to(dtype), ref_logits(x, norm_w, w).to(dtype), "head, symmetric")
    keys.zero_()
    quant.head_keys(x, norm_w, w, EPS, keys, tuning=CUDA)
    assert _argmax_row(keys[0]) == int(logits[0].argmax())
    again = torch.zeros_like(keys)
    quant.head_keys(x, norm_w, w, EPS, again, tuning=CUDA)
    assert torch.equal(keys, again)


@pytest.mark.gpu
@pytest.mark.parametrize("K", [2560, quant.GATHER_K])
def test_act_order_is_gathered_by_the_launcher_first(K, monkeypatch) -> None:
    w = _weight(96, K, 128, True, 0, torch.float16, "cuda", perm=True)
    x, norm_w = _inputs(K, torch.bfloat16, "cuda")
    _force_cuda(monkeypatch)
    assert quant.layout(w, "norm_linear").gather is not None
    assert_close(quant.norm_linear(x, norm_w, w, EPS, tuning=CUDA),
                 ref_norm_linear(x, norm_w, w), "act-order")  # fmt: skip


@pytest.mark.gpu
def test_a_cuda_graph_with_pdl_replays_the_chain(monkeypatch) -> None:
    """qkv-like, residual and gate_up launches back to back under PDL in one graph: each
    waits for the previous kernel's output before reading it."""
    _force_cuda(monkeypatch)
    H, inter = 1024, 1536
    w_in = _weight(H, H, 128, False, 0, torch.float16, "cuda")
    w_gu = _weight(2 * inter, H, 128, True, 0, torch.float16, "cuda")
    w_down = _weight(H, inter, 128, False, 0, torch.float16, "cuda")
    x, norm_w = _inputs(H, torch.bfloat16, "cuda")
    res = x.clone()
    tuning = DecodeTuning(pdl=True)

    def chain() -> torch.Tensor:
        res.copy_(x)
        h = quant.norm_linear(res, norm_w, w_in, EPS, tuning=tuning)
        quant.linear_residual(h, w_in, res, tuning=tuning)
        act = quant.norm_gate_up_silu(res, norm_w, w_gu, EPS, tuning=tuning)
        quant.linear_residual(act, w_down, res, tuning=tuning)
        return res

    want = chain().clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        chain()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    res.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(res, want)
