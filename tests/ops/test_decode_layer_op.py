"""The fused `decode_layer` op: the sequence of the five fused ops, bit for bit, for each
family's switches (q/k/v bias, q/k norms); its origin labels; a `decode_layer` candidate
file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evokernel.ops import reference
from evokernel.ops.candidates import load_candidate
from evokernel.ops.registry import OpSet
from evokernel.ops.rope import rope_table

H, HQ, HKV, D, INTER, S = 64, 4, 2, 32, 96, 40

# The pack tests' torch-ops layer program (returns a new tensor, counts its calls in CALLS).
LAYER_CANDIDATE = (Path(__file__).parents[1] / "packs" / "torch_layer_program.py").read_text()


def _layer_inputs(
    B: int, seed: int = 0, device: str = "cpu", bias: bool = False, qk_norm: bool = True
) -> dict:
    """One layer's inputs in float32 on `device` (Qwen3's family by default; `bias` and
    `qk_norm` switch the family's parts)."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale

    cos, sin = rope_table(D, 1_000_000.0, S, torch.device("cpu"))
    positions = torch.tensor([5, 17, 0][:B], dtype=torch.int32)
    inputs = {
        "h": rnd(B, H),
        "input_norm": 1 + 0.1 * rnd(H),
        "qkv_proj": rnd((HQ + 2 * HKV) * D, H, scale=H**-0.5),
        "qkv_bias": 0.1 * rnd((HQ + 2 * HKV) * D) if bias else None,
        "q_norm": 1 + 0.1 * rnd(D) if qk_norm else None,
        "k_norm": 1 + 0.1 * rnd(D) if qk_norm else None,
        "o_proj": rnd(H, HQ * D, scale=(HQ * D) ** -0.5),
        "post_attn_norm": 1 + 0.1 * rnd(H),
        "gate_up_proj": rnd(2 * INTER, H, scale=H**-0.5),
        "down_proj": rnd(H, INTER, scale=INTER**-0.5),
        "cos": cos,
        "sin": sin,
        "positions": positions,
        "k_cache": rnd(B, HKV, S, D),
        "v_cache": rnd(B, HKV, S, D),
        "seq_lens": positions + 1,
        "scale": D**-0.5,
        "eps": 1e-6,
        "max_len": 32,
    }
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _copy(inputs: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _old_sequence(ops: OpSet, x: dict) -> torch.Tensor:
    """The five fused ops in the layer's order (what `decode_layer` composes)."""
    h, eps = x["h"], x["eps"]
    qkv = ops.norm_linear(h, x["input_norm"], x["qkv_proj"], eps, x["qkv_bias"])
    attn = ops.decode_attention_qkv(
        qkv, x["q_norm"], x["k_norm"], x["cos"], x["sin"], x["positions"], x["k_cache"],
        x["v_cache"], x["seq_lens"], x["scale"], eps, x["max_len"],
    )  # fmt: skip
    ops.linear_residual(attn, x["o_proj"], h)
    act = ops.norm_gate_up_silu(h, x["post_attn_norm"], x["gate_up_proj"], eps)
    ops.linear_residual(act, x["down_proj"], h)
    return h


def _call(ops: OpSet, x: dict) -> torch.Tensor:
    rest = {k: v for k, v in x.items() if k != "h"}
    return ops.decode_layer(x["h"], **rest)  # keywords after h


FAMILY_CASES = [(1, False, True), (3, False, True), (2, True, False), (1, False, False)]


@pytest.mark.parametrize("kind", ["torch", "triton"])
@pytest.mark.parametrize(("B", "bias", "qk_norm"), FAMILY_CASES)
def test_decode_layer_is_the_fused_sequence_bit_for_bit(
    kind: str, B: int, bias: bool, qk_norm: bool, device: str
) -> None:
    ops = OpSet.named(kind, pdl=False)  # Triton: under the interpreter on the CPU
    inputs = _layer_inputs(B, seed=B, device=device, bias=bias, qk_norm=qk_norm)
    old, new = _copy(inputs), _copy(inputs)
    want = _old_sequence(ops, old)
    got = _call(ops, new)
    assert torch.equal(got, want)
    assert got.data_ptr() == new["h"].data_ptr()  # in place, as before
    assert torch.equal(new["k_cache"], old["k_cache"])
    assert torch.equal(new["v_cache"], old["v_cache"])
    assert not torch.equal(new["k_cache"], inputs["k_cache"])  # this token's K was written


def test_decode_layer_origin_labels(tmp_path: Path, device: str) -> None:
    assert OpSet.torch().origin["decode_layer"] == "torch"
    assert OpSet.triton(pdl=False).origin["decode_layer"] == "triton"
    cand = tmp_path / "attn.py"
    cand.write_text(
        "from evokernel.ops.reference import decode_attention\n"
        "def attention(q, k_cache, v_cache, seq_lens, scale):\n"
        "    return decode_attention(q, k_cache, v_cache, seq_lens, scale)\n"
    )
    # One plain op replaced: the fused ops around it and the layer are composed.
    ops = OpSet.triton(pdl=False).with_candidate("decode_attention", cand)
    assert ops.origin["decode_attention_qkv"] == "composed"
    assert ops.origin["norm_linear"] == "triton"
    assert ops.origin["decode_layer"] == "composed"
    x = _layer_inputs(2, device=device)
    assert torch.equal(_call(ops, _copy(x)), _old_sequence(ops, _copy(x)))


def test_decode_layer_candidate_replaces_the_layer(tmp_path: Path) -> None:
    path = tmp_path / "layer.py"
    path.write_text(LAYER_CANDIDATE)
    ops = OpSet.torch().with_candidate("decode_layer", path)
    assert ops.origin["decode_layer"] == str(path)
    assert ops.origin["norm_linear"] == "torch"
    calls = load_candidate(path, "decode_layer").__globals__["CALLS"]
    x = _layer_inputs(3)
    mine, ref = _copy(x), _copy(x)
    got = _call(ops, mine)
    assert calls == [x["max_len"]]
    assert torch.equal(got, _old_sequence(OpSet.torch(), ref))
    assert torch.equal(mine["k_cache"], ref["k_cache"])
    # Replacing one of its parts afterwards re-composes the layer from the op set's ops.
    again = ops.replace(rms_norm=(reference.rms_norm, "mine"))
    assert again.origin["decode_layer"] == "composed"
    calls.clear()
    assert torch.equal(_call(again, _copy(x)), _old_sequence(OpSet.torch(), _copy(x)))
    assert calls == []


@pytest.mark.gpu
def test_triton_decode_layer_is_the_old_sequence_in_bf16_on_the_gpu() -> None:
    ops = OpSet.triton()  # with programmatic dependent launch on sm_90+
    for B in (1, 3):
        x = _layer_inputs(B, seed=B, device="cuda")
        x = {  # bfloat16, but the RoPE tables stay float32
            k: v.bfloat16() if isinstance(v, torch.Tensor) and v.is_floating_point()
            and k not in ("cos", "sin") else v
            for k, v in x.items()
        }  # fmt: skip
        old, new = _copy(x), _copy(x)
        assert torch.equal(_call(ops, new), _old_sequence(ops, old))
        assert torch.equal(new["k_cache"], old["k_cache"])
        assert torch.equal(new["v_cache"], old["v_cache"])
