"""The persistent decode step (ops/persistent.py, kernels/cuda/decode_persistent.cu): where it
applies, its work split, that it is off unless asked for (its source builds in
tests/ops/test_cuda_build.py), and on a GPU that it gives the per-layer step's residual
stream, cache and greedy tokens."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from evokernel.ops import persistent
from evokernel.ops.registry import OpSet
from evokernel.ops.tuning import DEFAULT, DecodeTuning, check_tuning


def _cfg(**kw: int) -> SimpleNamespace:
    base = dict(head_dim=128, num_attention_heads=16, num_key_value_heads=8, hidden_size=1024,
                intermediate_size=3072)  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


def _weights(cfg: SimpleNamespace, bias: bool = False) -> SimpleNamespace:
    D, hq, hkv, H = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hidden_size
    meta = torch.device("meta")
    layer = SimpleNamespace(
        qkv_proj=torch.empty((hq + 2 * hkv) * D, H, device=meta, dtype=torch.bfloat16),
        o_proj=torch.empty(H, hq * D, device=meta, dtype=torch.bfloat16),
        gate_up_proj=torch.empty(2 * cfg.intermediate_size, H, device=meta, dtype=torch.bfloat16),
        down_proj=torch.empty(H, cfg.intermediate_size, device=meta, dtype=torch.bfloat16),
        qkv_bias=torch.empty(1, device=meta) if bias else None,
        q_norm=torch.empty(D, device=meta),
        k_norm=torch.empty(D, device=meta),
    )
    return SimpleNamespace(dtype=torch.bfloat16, layers=[layer])


def test_the_shapes_it_serves_and_the_one_line_why_not() -> None:
    cfg = _cfg()
    assert persistent.shape_why_not(cfg, _weights(cfg), 1, 132) is None
    assert "batch 4" in str(persistent.shape_why_not(cfg, _weights(cfg), 4, 132))
    gqa4 = _cfg(num_attention_heads=32)
    assert "2 query heads" in str(persistent.shape_why_not(gqa4, _weights(gqa4), 1, 132))
    assert "biases" in str(persistent.shape_why_not(cfg, _weights(cfg, bias=True), 1, 132))
    odd = _cfg(intermediate_size=3000)
    assert "multiple of 256" in str(persistent.shape_why_not(odd, _weights(odd), 1, 132))
    wide = _cfg(intermediate_size=9728)  # Qwen3-4B: a down row of 19 KB
    assert "16 KB ring slot" in str(persistent.shape_why_not(wide, _weights(wide), 1, 132))
    assert "rows a CTA" in str(persistent.shape_why_not(cfg, _weights(cfg), 1, 8))


def test_the_attention_split_covers_the_bound_in_16_row_tiles() -> None:
    for bound in (1, 16, 17, 200, 256, 1000, 4096, 32768):
        for rows in (16, 64, 128, 240):
            split, chunk = persistent.split_for(bound, 8, 132, rows)
            assert 1 <= split <= 132 // 8 and chunk % 16 == 0 and split * chunk >= bound
            assert split == 1 or chunk < bound
    assert persistent.split_for(256, 8, 132, 128) == (2, 128)
    assert persistent.split_for(32768, 8, 132, 128) == (16, 2048)  # capped at SMs / kv heads


def test_ring_chunks_of_each_stage() -> None:
    assert [persistent.rows_per_chunk(k, 2) for k in (1024, 2048, 3072, 6144, 8192)] == [
        8,
        4,
        2,
        1,
        1,
    ]
    cfg = _cfg()  # Qwen3-0.6B on 132 SMs: qkv 32 rows in 4 chunks, gate_up 2 x 24 in 6
    cfg.num_hidden_layers = 28
    assert persistent.stage_chunks(cfg, 2, 132) == 6
    assert persistent.stage_chunks(cfg, 2, 16) == 48


def test_off_unless_asked_for_and_checked() -> None:
    assert DEFAULT.persistent_max == 0
    assert OpSet.triton(False).decode_tuning() == DEFAULT
    assert OpSet.torch().decode_tuning() is None
    assert OpSet.triton(False).retuned(persistent_max=4096).decode_tuning().persistent_max == 4096
    with pytest.raises(AssertionError, match="persistent_attn_rows"):
        check_tuning(DecodeTuning(persistent_attn_rows=20))


def test_no_persistent_step_without_a_cuda_device(tmp_path: Path) -> None:
    """Asked for on the CPU, the step stays per layer."""
    from evokernel.engine.loading import load_engine
    from evokernel.model.random import write_random_checkpoint

    tiny = write_random_checkpoint(tmp_path / "tiny", "tiny", seed=0, dtype="float32")
    model = load_engine(tiny, "cpu", torch.float32, "torch")
    cache = model.new_cache(1, 16)
    assert persistent.why_not(model.cfg, model.weights, cache) == (
        "not a CUDA device of sm_90 or later"
    )
    assert model._persistent_layers(cache, 16) is None  # torch ops carry no tuning
    model.ops = OpSet.triton(False).retuned(persistent_max=1 << 20)
    assert model._persistent_layers(cache, 16) is None


@pytest.mark.gpu
@pytest.mark.parametrize("attn_rows", [16, 128])
def test_the_persistent_step_matches_the_per_layer_step(tmp_path: Path, attn_rows: int) -> None:
    """Qwen3-0.6B's layer shapes (4 layers), random cache contents, positions in one tile, over
    several tiles and chunks (forced small with 16 rows a chunk): the residual stream and the
    appended K/V against the per-layer kernels (bf16 sums in another order), then 24 greedy
    tokens from a prompt, equal."""
    from evokernel.engine.loading import load_engine
    from evokernel.model.random import write_random_checkpoint

    ckpt = write_random_checkpoint(tmp_path / "m", "qwen3-0.6b", layers=4, vocab=4096)
    model = load_engine(ckpt, "cuda", torch.bfloat16, "triton")
    base = OpSet.triton(True)
    fast = base.retuned(persistent_max=1 << 20, persistent_attn_rows=attn_rows)
    cache = model.new_cache(1, 1100)
    for t in (*cache.k, *cache.v):
        t.normal_()
    tokens = torch.tensor([17], device="cuda")
    for p in (1, 37, 300, 1024):
        pos = torch.tensor([p - 1], device="cuda", dtype=torch.int32)
        k0, v0 = [t.clone() for t in cache.k], [t.clone() for t in cache.v]
        model.ops = base
        ref = model._decode_layers(tokens, pos, pos + 1, cache, 1100).float()
        k_ref = [t.clone() for t in cache.k]
        for t, s in zip((*cache.k, *cache.v), (*k0, *v0), strict=True):
            t.copy_(s)
        model.ops = fast
        layers = model._persistent_layers(cache, 1100)
        assert layers is not None
        got = model._decode_layers(tokens, pos, pos + 1, cache, 1100).float()
        assert not layers.error()
        cos = torch.nn.functional.cosine_similarity(got, ref).item()
        assert cos > 0.999 and (got - ref).norm() / ref.norm() < 0.05, (p, cos)
        for a, b in zip(cache.k, k_ref, strict=True):
            assert (a[0, :, p - 1].float() - b[0, :, p - 1].float()).abs().max() < 0.1
            assert torch.equal(a[0, :, : p - 1], b[0, :, : p - 1])  # earlier rows untouched
    outs = []
    for ops in (base, fast):
        model.ops = ops
        c = model.new_cache(1, 64)
        tok = torch.tensor([7], device="cuda")
        pos = torch.zeros(1, device="cuda", dtype=torch.int32)
        lens = torch.ones(1, device="cuda", dtype=torch.int32)
        seq = []
        for _ in range(24):
            model.decode_greedy(tok, pos, lens, c, 64)
            seq.append(int(tok.item()))
        outs.append(seq)
    assert outs[0] == outs[1]
