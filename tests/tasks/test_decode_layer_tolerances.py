"""`decode_layer`'s tolerances against emulated layers (task.py's comment block has the full
measurements, GPU shapes included): the engine's kernels, the torch-ops layer and a layer that
rounds its outputs only pass in every dtype on every CPU scenario; the same layer in the next
lower precision fails. bfloat16 is emulated (float32 arithmetic, rounding to bfloat16), as the
interpreter cannot run it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from task_checks import errors, passes

from evokernel.tasks import get_task

TASK = get_task("decode_layer")
CPU = TASK.scenarios("cpu") + TASK.hidden_scenarios("cpu", 0) + TASK.hidden_scenarios("cpu", 1)
LOWER = {
    torch.float32: torch.float16,
    torch.float16: torch.bfloat16,
    torch.bfloat16: torch.float8_e4m3fn,
}


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def emulated(inputs: dict, dtype: torch.dtype, mode: str) -> torch.Tensor:
    """The layer in float32 arithmetic on inputs rounded to `dtype`, rounding to `dtype` where
    the model rounds; its attention as the torch ops compute it ("torch": scores and
    probabilities rounded) or as the engine's kernels do ("engine": unrounded scores, p rounded
    for p @ V, normalised after); or ("outputs") rounding only the outputs, every intermediate
    kept in float32. Returns the judged layout [h_out | K rows | V rows]."""

    def rnd(x: torch.Tensor) -> torch.Tensor:
        return x.to(dtype).float()

    inner = rnd if mode in ("torch", "engine") else (lambda x: x)
    eps = float(inputs["eps"])

    def get(name: str) -> torch.Tensor:
        return rnd(inputs[name].float())

    def norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return inner(w * inner(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)))

    h = get("h")
    B = h.shape[0]
    k_cache, v_cache = inputs["k_cache"], inputs["v_cache"]
    Hkv, D = k_cache.shape[1], k_cache.shape[3]
    qkv = inner(norm(h, get("input_norm")) @ get("qkv_proj").T)
    Hq = qkv.shape[1] // D - 2 * Hkv
    heads = qkv.view(B, -1, D)
    q = norm(heads[:, :Hq], get("q_norm"))
    k = norm(heads[:, Hq : Hq + Hkv], get("k_norm"))
    v = rnd(heads[:, Hq + Hkv :])
    pos = inputs["positions"].long()
    c = inner(inputs["cos"][pos])[:, None, :]
    s = inner(inputs["sin"][pos])[:, None, :]
    c, s = torch.cat((c, c), -1), torch.cat((s, s), -1)
    q = inner(inner(q * c) + inner(_rotate_half(q) * s))
    k = rnd(inner(k * c) + inner(_rotate_half(k) * s))
    scale = float(inputs["scale"])
    attn = torch.empty((B, Hq, D))
    for b, n in enumerate(inputs["seq_lens"].tolist()):
        keys = rnd(k_cache[b, :, :n].float())
        values = rnd(v_cache[b, :, :n].float())
        keys[:, int(pos[b])] = k[b]
        values[:, int(pos[b])] = v[b]
        qb = q[b].view(Hkv, Hq // Hkv, D)
        if mode == "torch":
            scores = rnd(rnd(qb @ keys.transpose(-1, -2)) * scale)
            attn[b] = rnd(rnd(torch.softmax(scores, -1)) @ values).reshape(Hq, D)
        elif mode == "engine":
            scores = (qb @ keys.transpose(-1, -2)) * scale
            p = torch.exp(scores - scores.amax(-1, keepdim=True))
            attn[b] = rnd((rnd(p) @ values) / p.sum(-1, keepdim=True)).reshape(Hq, D)
        else:
            scores = (qb @ keys.transpose(-1, -2)) * scale
            attn[b] = (torch.softmax(scores, -1) @ values).reshape(Hq, D)
    h = inner(h + inner(attn.reshape(B, -1) @ get("o_proj").T))
    gate_up = inner(norm(h, get("post_attn_norm")) @ get("gate_up_proj").T)
    inter = gate_up.shape[1] // 2
    act = inner(inner(F.silu(gate_up[:, :inter])) * gate_up[:, inter:])
    h = rnd(h + inner(act @ get("down_proj").T))
    return torch.cat((h.reshape(-1), k.reshape(-1), v.reshape(-1)))


def test_tolerances_order_the_dtypes():
    f32, f16, bf16 = (TASK.tolerance(d) for d in (torch.float32, torch.float16, torch.bfloat16))
    for tol in (f32, f16, bf16):
        assert 0 < tol.rel_l2 <= tol.max_abs_rel
    assert f32.rel_l2 < f16.rel_l2 < bf16.rel_l2
    assert f32.rel_l2 < 2**-11 / 10  # float16 rounding alone exceeds the float32 bound
    assert f16.rel_l2 >= 2 * 2**-11 and bf16.rel_l2 >= 2 * 2**-8


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_emulated_layers_pass_and_lower_precision_fails(dtype):
    tol = TASK.tolerance(dtype)
    for s in CPU:
        inputs = TASK.make_inputs(s, 0, dtype)
        ref = TASK.reference(inputs)
        assert passes(ref.to(dtype), ref, tol), s.name
        for mode in ("engine", "torch", "outputs"):
            assert passes(emulated(inputs, dtype, mode), ref, tol), (s.name, mode)
        rel_l2, max_abs_rel = errors(emulated(inputs, dtype, "engine"), ref)
        assert rel_l2 < tol.rel_l2 / 4 and max_abs_rel < tol.max_abs_rel / 3, s.name
        low = emulated(inputs, LOWER[dtype], "torch")
        assert not passes(low, ref, tol), (s.name, dtype)
        assert errors(low, ref)[0] > 1.3 * tol.rel_l2, (s.name, dtype)
