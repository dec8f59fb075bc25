"""The `gqa_decode_attention` task: one decode step of grouped-query attention over a static
KV cache (interface fixed by the product; see `INTERFACE`).

Reference: float64 on the inputs' device (returned on the CPU), per sequence on the valid
positions only (junk never touched).
Baselines, called with the candidate's keywords:
  sdpa_masked  F.scaled_dot_product_attention(enable_gqa=True) over the whole cache with a
               boolean length mask: what a user writes for mixed lengths. It propagates NaN
               junk keys (additive mask: NaN + -inf = NaN), so it is valid on input sets whose
               `junk_kind` is "finite". On CUDA a mask with enable_gqa runs the math backend.
  sdpa_sliced  for uniform lengths only (all public scenarios): SDPA on the cache sliced to the
               valid length, no mask, so the flash backend can run. The length comes from the
               scenario, so the call has no host sync.
Roofline: bytes_moved = q + the valid K/V positions + seq_lens + the output; rotating_bytes =
the valid K/V bytes, which a real decode step reads cold (the cache of all layers is far larger
than L2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from evokernel.tasks.base import DEVICE_DTYPES, Inputs, OutputSpec, Scenario, Task, Tolerance
from evokernel.tasks.gqa_decode_attention import inputs as _inputs
from evokernel.tasks.gqa_decode_attention import scenarios as _scenarios

SEED = Path(__file__).with_name("seed.py")  # the seed candidate, loaded by path

INTERFACE = '''def attention(q, k_cache, v_cache, seq_lens, scale):
    """One decode step of grouped-query attention.

    q:        [B, Hq, D]          the new token's queries
    k_cache:  [B, Hkv, S_max, D]  keys; positions >= seq_lens[b] hold junk and must be ignored
    v_cache:  [B, Hkv, S_max, D]  values, same layout
    seq_lens: [B] int32           valid positions per sequence, 1 <= seq_lens[b] <= S_max
    scale:    float               softmax scale, usually D ** -0.5
    returns   [B, Hq, D] in q's dtype; query head h reads kv head h // (Hq // Hkv)
    """'''

DESCRIPTION = (
    "One decode step of grouped-query attention over a static KV cache [B, Hkv, S_max, D]. "
    "Memory-bound: time is set by reading the valid K/V positions once. Qwen3-0.6B has "
    "Hq=16, Hkv=8, D=128; at batch 1 a one-program-per-head kernel occupies 16 SMs, so long "
    "contexts need the sequence split across programs (flash-decoding). Cache positions past "
    "seq_lens[b] hold junk (NaN or huge values) that must never reach the output."
)

# Tolerances: worst case over the public and hidden scenarios of both devices, seeds 0-2, of
# float32-accumulating emulations (docs/tasks.md; tests/tasks/test_tolerances.py re-checks the
# CPU side). u is the unit roundoff of the dtype.
#   float32   correct: rel L2 <= 8e-7, max-abs-rel <= 1.1e-6. The same math on float16-rounded
#             inputs: >= 2.0e-4 / 2.6e-4. 1e-5 rejects it with a 20x margin.
#   float16   correct (p and the output rounded, u = 4.9e-4): <= 3.0e-4 / 4.9e-4; bfloat16
#             arithmetic: >= 1.6e-3 / 2.1e-3. (1e-3, 2e-3) sits between, 3-4x above correct.
#   bfloat16  correct (u = 3.9e-3): <= 2.4e-3 / 4.2e-3 (bounded by about 2u); float8 (e4m3)
#             arithmetic: >= 7.6e-3 / 2.6e-2. (1e-2, 2e-2) passes correct kernels with a 4x
#             margin and rejects float8 on max-abs-rel.
TOLERANCES = {
    torch.float32: Tolerance(rel_l2=1e-5, max_abs_rel=1e-5),
    torch.float16: Tolerance(rel_l2=1e-3, max_abs_rel=2e-3),
    torch.bfloat16: Tolerance(rel_l2=1e-2, max_abs_rel=2e-2),
}


def reference(inputs: Inputs) -> torch.Tensor:
    """float64 on the inputs' device, returned on the CPU; reads positions [0, seq_lens[b])
    only. Returns [B, Hq, D]."""
    q = inputs["q"].detach().to(torch.float64)
    k_cache = inputs["k_cache"].detach()
    v_cache = inputs["v_cache"].detach()
    lens = [int(n) for n in inputs["seq_lens"].tolist()]
    scale = float(inputs["scale"])
    B, Hq, D = q.shape
    Hkv = k_cache.shape[1]
    group = Hq // Hkv
    out = torch.empty((B, Hq, D), dtype=torch.float64, device=q.device)
    for b, n in enumerate(lens):
        k = k_cache[b, :, :n].to(torch.float64)  # [Hkv, n, D]
        v = v_cache[b, :, :n].to(torch.float64)
        qb = q[b].view(Hkv, group, D)  # query head h = kv * group + g
        s = torch.einsum("kgd,knd->kgn", qb, k) * scale
        p = torch.softmax(s, dim=-1)
        out[b] = torch.einsum("kgn,knd->kgd", p, v).reshape(Hq, D)
    return out.cpu()


def sdpa_masked(q, k_cache, v_cache, seq_lens, scale):
    """Stock SDPA over the whole cache with a [B, 1, 1, S_max] boolean length mask."""
    positions = torch.arange(k_cache.shape[2], device=q.device)
    mask = (positions[None, :] < seq_lens[:, None])[:, None, None, :]
    out = F.scaled_dot_product_attention(
        q[:, :, None, :], k_cache, v_cache, attn_mask=mask, scale=scale, enable_gqa=True
    )
    return out[:, :, 0, :]


def sdpa_sliced(length: int) -> Callable[..., torch.Tensor]:
    """Stock SDPA on the cache sliced to `length` valid positions (uniform lengths), no mask."""

    def call(q, k_cache, v_cache, seq_lens, scale):
        k = k_cache[:, :, :length]
        v = v_cache[:, :, :length]
        out = F.scaled_dot_product_attention(q[:, :, None, :], k, v, scale=scale, enable_gqa=True)
        return out[:, :, 0, :]

    return call


@dataclass
class GqaDecodeAttention(Task):
    name: str = "gqa_decode_attention"
    entry_point: str = "attention"
    op: str | None = "decode_attention"
    interface: str = INTERFACE
    description: str = DESCRIPTION
    seed_candidate: Path = SEED
    dtypes: Mapping[str, tuple[torch.dtype, ...]] = field(default_factory=lambda: DEVICE_DTYPES)

    def scenarios(self, device: str) -> list[Scenario]:
        return _scenarios.public_scenarios(device)

    def hidden_scenarios(self, device: str, seed: int) -> list[Scenario]:
        return _scenarios.hidden_scenarios(device, seed)

    def make_inputs(
        self, scenario: Scenario, seed: int, dtype: torch.dtype, device: str = "cpu"
    ) -> Inputs:
        return _inputs.make_inputs(scenario, seed, dtype, device)

    def perturb(self, inputs: Inputs, seed: int) -> None:
        _inputs.perturb(inputs, seed)

    def junk_kind(self, scenario: Scenario, seed: int) -> str:
        """ "nan" or "finite": what the K cache holds past seq_lens in this input set."""
        return _inputs.junk_kind(scenario, seed)

    def output_spec(self, inputs: Inputs) -> OutputSpec:
        return OutputSpec(shape=tuple(inputs["q"].shape), dtype=inputs["q"].dtype)

    def reference(self, inputs: Inputs) -> torch.Tensor:
        return reference(inputs)

    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        return TOLERANCES[dtype]

    def baselines(self, scenario: Scenario) -> dict[str, Callable[..., torch.Tensor]]:
        lens = tuple(scenario.params["seq_lens"])
        found: dict[str, Callable[..., torch.Tensor]] = {"sdpa_masked": sdpa_masked}
        if len(set(lens)) == 1:
            found["sdpa_sliced"] = sdpa_sliced(lens[0])
        return found

    def bytes_moved(self, scenario: Scenario, dtype: torch.dtype) -> int:
        p = scenario.params
        e = torch.empty((), dtype=dtype).element_size()
        q_and_out = 2 * p["B"] * p["Hq"] * p["D"] * e
        return q_and_out + self.rotating_bytes(scenario, dtype) + 4 * p["B"]

    def flops(self, scenario: Scenario) -> int:
        p = scenario.params
        # per query head and valid position: q.k (2D) and p*v (2D)
        return 4 * p["Hq"] * p["D"] * sum(p["seq_lens"])

    def rotating_bytes(self, scenario: Scenario, dtype: torch.dtype) -> int:
        p = scenario.params
        e = torch.empty((), dtype=dtype).element_size()
        return 2 * sum(p["seq_lens"]) * p["Hkv"] * p["D"] * e


def task() -> GqaDecodeAttention:
    return GqaDecodeAttention()
