"""Source transformations: each applies where its pattern is, is skipped where it is not, and
keeps the kernels computing the same function (run under the Triton interpreter on the CPU)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

from evokernel.evolve.mutators.transforms import (
    TRANSFORMS,
    add_cache_modifier,
    add_contiguity_hints,
    drop_contiguity_hints,
    evict_first_streams,
    evict_last_reused,
    exp_to_exp2,
)
from evokernel.tasks.blocks import check_edit, find_block, parse_knobs, replace_block, set_knobs

SEEDS = sorted((Path(__file__).resolve().parents[3] / "src/evokernel/tasks").glob("*/seed.py"))


def test_exp2_folds_log2e_into_the_one_scale_multiplication():
    body = "s = qk * sm_scale\np = tl.exp(s - m)\nlse = m + tl.log(l)\nx = tl.math.exp(y)"
    out = exp_to_exp2(body)
    assert out == (
        "s = qk * (sm_scale * 1.4426950408889634)\np = tl.exp2(s - m)\n"
        "lse = m + tl.log2(l)\nx = tl.math.exp2(y)"
    )
    assert exp_to_exp2("qk *= scale\np = tl.exp(qk)") == (
        "qk *= (scale * 1.4426950408889634)\np = tl.exp2(qk)"
    )


@pytest.mark.parametrize(
    "body",
    [
        "p = tl.exp(s)",  # no scale
        "s = a * scale\nt = b * scale\np = tl.exp(s)",  # two scale sites
        "s = a * scale\np = tl.exp2(s)",  # already base 2
        "s = a * scale\np = tl.exp(s)\nq = tl.exp2(t)",  # mixed
        "s = a * scale  # tl.exp( in a comment only",
        "s = a * scale\nmsg = 'tl.exp(x)'",  # in a string only
        "def f(scale):\n    return tl.exp(scale)",  # the scale is never multiplied
        "s = a * scale\np = tl.exp(s",  # does not tokenize
    ],
)
def test_exp2_skipped(body):
    assert exp_to_exp2(body) is None


LOADS = """
@triton.jit
def k(q_ptr, k_ptr, x_ptr, w_ptr, o_ptr, n, BLOCK: tl.constexpr):
    q = tl.load(q_ptr + offs)
    other = tl.load(o_ptr)
    for i in range(n):
        kk = tl.load(k_ptr + i, mask=m,)
        x = tl.load(x_ptr + i)
        w = tl.load(
            w_ptr + i,
            mask=m,
        )
        t = tl.load(o_ptr + i, eviction_policy="evict_last")
"""


def test_eviction_hints_by_name_then_position():
    first = evict_first_streams(LOADS)
    assert first is not None
    assert 'tl.load(k_ptr + i, mask=m, eviction_policy="evict_first")' in first
    assert 'mask=m,\n eviction_policy="evict_first"' not in first
    assert '            mask=m, eviction_policy="evict_first"\n        )' in first
    assert "tl.load(x_ptr + i)\n" in first  # x is reused: not streaming
    assert 'tl.load(o_ptr + i, eviction_policy="evict_last")' in first  # left alone
    last = evict_last_reused(LOADS)
    assert last is not None
    assert 'tl.load(q_ptr + offs, eviction_policy="evict_last")' in last
    assert 'tl.load(o_ptr, eviction_policy="evict_last")' in last  # outside a loop
    assert 'tl.load(x_ptr + i, eviction_policy="evict_last")' in last
    assert evict_first_streams(first) is None and evict_last_reused(last) is None
    assert evict_first_streams("x = 1") is None


def test_cache_modifier_on_streaming_loads_only():
    out = add_cache_modifier(LOADS)
    assert out is not None and out.count('cache_modifier=".cg"') == 3
    assert "tl.load(q_ptr + offs)" in out
    assert add_cache_modifier(out) is None


def test_contiguity_hints_on_tile_offsets_only():
    body = (
        "    offs = pid * BLOCK + tl.arange(0, BLOCK)  # rows\n"
        "    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)\n"
        "    offs_k = k0 + tl.arange(0, BLOCK_K)\n"
        "    offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_N)\n"
    )
    out = add_contiguity_hints(body)
    assert out is not None
    assert (
        "    offs = tl.max_contiguous(tl.multiple_of(pid * BLOCK + tl.arange(0, BLOCK), BLOCK), "
        "BLOCK)  # rows\n" in out
    )
    assert "tl.multiple_of(tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N), BLOCK_N)" in out
    assert "    offs_k = k0 + tl.arange(0, BLOCK_K)\n" in out  # start not a known multiple
    assert "    offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_N)\n" in out  # mismatched sizes
    assert add_contiguity_hints(out) is None
    assert drop_contiguity_hints(out) == body
    assert drop_contiguity_hints(body) is None


def _load(code: str, name: str, tmp: Path):
    path = tmp / f"{name}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


needs_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
    reason="needs the Triton interpreter or a GPU",
)


@needs_interpreter
def test_transformed_toy_kernels_compute_the_same(toy_source, tmp_path, device):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*s, generator=g) for s in ((3, 32), (3, 37, 32), (3, 37, 32)))
    x = torch.randn(300, generator=g)
    ref = (torch.softmax((k @ q[:, :, None]).squeeze(-1) * 0.3, -1)[:, None, :] @ v).squeeze(1)
    body = find_block(toy_source).body(toy_source)
    applied = []
    for name, t in TRANSFORMS.items():
        new = t.apply(body)
        if new is None:
            continue
        applied.append(name)
        code = replace_block(toy_source, new)
        assert check_edit(toy_source, code) is None and parse_knobs(code) == parse_knobs(toy_source)
        mod = _load(code, f"toy_{name}", tmp_path)
        dev = [t.to(device) for t in (q, k, v, x)]
        out = mod.attend(dev[0], dev[1], dev[2], 0.3).cpu()
        assert torch.allclose(out, ref, atol=1e-5), name
        assert torch.allclose(mod.scaled_copy(dev[3], 2.0).cpu(), 2 * x), name
    assert applied == ["exp2", "evict_first", "evict_last", "cache_modifier", "contiguity_hints"]


def _attention_ref(q, k, v, seq_lens, scale):
    B, Hq, D = q.shape
    group = Hq // k.shape[1]
    out = torch.empty(B, Hq, D, dtype=torch.float64)
    for b in range(B):
        n = int(seq_lens[b])
        for h in range(Hq):
            kk, vv = k[b, h // group, :n].double(), v[b, h // group, :n].double()
            out[b, h] = torch.softmax(kk @ q[b, h].double() * scale, 0) @ vv
    return out


@needs_interpreter
@pytest.mark.parametrize("seed", SEEDS, ids=[p.parent.name for p in SEEDS])
def test_transformed_seeds_compute_the_same(seed, tmp_path, device):
    source = seed.read_text()
    g = torch.Generator().manual_seed(1)
    names = {k.name for k in parse_knobs(source)}
    splits = [{}] + [{n: 4 if n == "SPLIT" else 2} for n in ("SPLIT", "SPLIT_K") if n in names]
    checked = 0
    for extra in splits:
        variant = set_knobs(source, extra)
        body = find_block(variant).body(variant)
        for name, t in TRANSFORMS.items():
            new = t.apply(body)
            if new is None:
                continue
            mod = _load(
                replace_block(variant, new), f"{seed.parent.name}_{name}_{len(extra)}", tmp_path
            )
            task = seed.parent.name  # the entry point by task: the layer seed also has launchers
            if task == "gqa_decode_attention":
                q, k, v = (
                    torch.randn(*s, generator=g)
                    for s in ((2, 4, 64), (2, 2, 50, 64), (2, 2, 50, 64))
                )
                lens = torch.tensor([37, 50], dtype=torch.int32)
                args = [t.to(device) for t in (q, k, v, lens)]
                out = mod.attention(*args, 0.125).cpu().double()
                ref = _attention_ref(q, k, v, lens, 0.125)
            elif task == "decode_linear":
                x, w = torch.randn(3, 300, generator=g), torch.randn(70, 300, generator=g)
                out = mod.linear(x.to(device), w.to(device)).cpu().double()
                ref = x.double() @ w.double().T
            else:
                pytest.skip(f"{seed} has no known entry point")
            err = (out - ref).abs().max().item() / ref.abs().max().item()
            assert err < 1e-4, f"{seed.parent.name} {name} {extra}: {err}"
            checked += 1
    assert checked >= 2, f"only {checked} transforms apply to {seed.parent.name}"
