"""`tune` on a quantized checkpoint: measure the packed kernels' launch choices on its own
weights, and keep them only where the whole decode step confirms them.

    launch = search_launch(model_dir, device, stream)         # QuantLaunch (kept: False)
    pack = confirm_launch(pack, model_dir, device, stream)    # kept, or not, end to end

Why: ops/quant.py picks each packed projection's dequantisation mode and warps from a table
measured at two model shapes (`CHOICES`); at other shapes a wrong choice cost up to 1.45x on
an H100, and the best one moves with K. The decode_layer task cannot search these (its
programs take dense projections), so a quantized checkpoint's pack carries these choices
instead of layer programs (pack.json `quantized`; the engine runs them as
`DecodeTuning.quant` entries, engine/packs/dispatch.py).

Roles: the checkpoint's packed projection kinds, qkv, o_proj, gate_up, down and head, each
keyed by what `choice` keys on (format, op, K); two roles with one key are measured as one.
The declared space (ops/quant.py): the dequantisation modes `modes(w, op)` (the 4-bit
per-value passes left out above K 1,024: the known-bad region is never sampled), `WARPS`,
and `TILE_BYTES` (`HEAD_TILES` for the head). The search is coordinate-wise from the table's
choice: every mode with the table's warps and tile, then every warps value with the best
mode, then every tile: about eight settings a role rather than the product. Each setting is
timed as a CUDA graph of that stage over all layers (distinct weights: L2 cold, as in a
step; the head once), the median of `REPS` replays, with the table's setting re-timed in
the same round; a setting replaces the incumbent only when faster by more than `MARGIN`.
A setting that fails to build (registers, shared memory) is skipped and said.

Confirmation (GPU), because a stage that is faster alone can make the step slower (on an
H100, INT8 and INT4 choices 3-15% faster as stage graphs made the 0.6B's step 0.5-7% slower:
larger tiles hold more registers, so a kernel's programs wait longer to start beside the
previous kernel's under programmatic dependent launch): the engine with and without the
choices, timed interleaved (bench/paired.py, as tune/confirm.py times programs), each beside
a control pair (the engine against a second copy of itself). First every changed role alone,
at `SCREEN_POSITIONS`: a role stays changed only when faster at some position beyond the
control and slower at none; then the survivors together at the first position of every
engine context bucket, by the same rule; only then does the engine run them (`kept`). On
the CPU nothing is timed: every role records the table's choice and the pack does not run
them.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch

from evokernel.engine.packs.format import Pack, QuantChoice, QuantLaunch
from evokernel.model.config import ModelConfig
from evokernel.model.weights import PackedWeight

REPS = 30
MARGIN = 0.02  # a setting must beat the incumbent by more than this (stage time)
RULE = (
    "per role, coordinate-wise over modes, warps and tiles from the table's choice, a stage "
    f"graph over all layers, replacing the incumbent only when > {MARGIN:.0%} faster; run by "
    "the engine only when the whole step, timed interleaved against the engine without them "
    "(each changed role alone first, then together at every bucket's first position), is "
    "faster somewhere beyond the control pair and slower nowhere"
)
CPU_RULE = "not timed on the CPU: the table's choices, not run from the pack"
SAME_RULE = "the table's choices measured fastest: nothing to run from the pack"


@dataclass(frozen=True)
class Role:
    """A packed projection kind and what `choice` keys it by."""

    name: str  # qkv, o_proj, gate_up, down, head
    op: str  # ops/quant.py OPS
    weight: PackedWeight  # layer 0's (the head's): its format and K

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.weight.format, self.op, int(self.weight.shape[1]))


def roles(weights: Any) -> list[Role]:
    """The packed projection kinds of a model's weights (model/weights.py `ModelWeights`), one
    role per (format, op, K)."""
    lw = weights.layers[0]
    found = [
        Role("qkv", "norm_linear", lw.qkv_proj),
        Role("o_proj", "linear_residual", lw.o_proj),
        Role("gate_up", "gate_up", lw.gate_up_proj),
        Role("down", "linear_residual", lw.down_proj),
        Role("head", "head", weights.lm_head),
    ]
    out: dict[tuple[str, str, int], Role] = {}
    for role in found:
        if isinstance(role.weight, PackedWeight) and role.key not in out:
            out[role.key] = role
    return list(out.values())


def table_choice(role: Role) -> tuple[str, int, int]:
    from evokernel.ops import quant

    return quant.choice(role.weight, role.op)


def settings(role: Role, mode: str, warps: int, stage: str) -> list[tuple[str, int, int]]:
    """One coordinate's settings (stage "mode", "warps" or "tile") around the incumbent's
    mode and warps (tile bytes 0 until the tile stage)."""
    from evokernel.ops import quant

    if stage == "mode":
        return [(m, warps, 0) for m in quant.modes(role.weight, role.op)]
    if stage == "warps":
        return [(mode, w, 0) for w in sorted({warps, *quant.WARPS})]
    tiles = quant.HEAD_TILES if role.op == "head" else quant.TILE_BYTES
    return [(mode, warps, t) for t in tiles]


def search_launch(model_dir: Path, device: str, stream: TextIO | None = None) -> QuantLaunch:
    """The launch choice of every role: measured on a GPU, the table's on the CPU."""
    from evokernel.engine.loading import load_engine

    out = stream or sys.stdout
    if device != "cuda":
        model = load_engine(model_dir, device, None, "torch", max_seq_len=8)
        table = [QuantChoice(r.name, *r.key, *table_choice(r), table=table_choice(r))
                 for r in roles(model.weights)]  # fmt: skip
        print(f"quantized launches: {len(table)} roles, not timed on the CPU", file=out)
        return QuantLaunch(tuple(table), kept=False, rule=CPU_RULE)
    model = load_engine(model_dir, device, torch.bfloat16, "torch", max_seq_len=64)
    bench = _StageBench(model)
    found = roles(model.weights)
    choices = [_search_role(bench, role, out) for role in found]
    changed = any((c.mode, c.warps, c.tile_bytes) != c.table_setting for c in choices)
    return QuantLaunch(tuple(choices), kept=False, rule=RULE if changed else SAME_RULE)


def _search_role(bench: _StageBench, role: Role, out: TextIO) -> QuantChoice:
    table = best = table_choice(role)
    table_us = best_us = 0.0
    for stage in ("mode", "warps", "tile"):
        table_us = bench.time(role, table)  # re-timed each round, beside the settings
        best_us = table_us if best == table else bench.time(role, best)
        for setting in settings(role, best[0], best[1], stage):
            if setting == best:
                continue
            try:
                us = bench.time(role, setting)
            except Exception as err:  # a setting that cannot be built here: skipped
                print(f"  {role.name} {_text(setting)}: skipped ({type(err).__name__}: "
                      f"{' '.join(str(err).split())[:120]})", file=out)  # fmt: skip
                continue
            if us < best_us * (1 - MARGIN):
                best, best_us = setting, us
    print(f"quantized launch {role.name} ({'/'.join(map(str, role.key))}): {_text(best)} "
          f"{best_us:.2f} us/layer, the table's {_text(table)} {table_us:.2f}",
          file=out)  # fmt: skip
    return QuantChoice(role.name, *role.key, *best, us=round(best_us, 3),
                       table_us=round(table_us, 3), table=table)  # fmt: skip


def _text(setting: tuple[str, int, int]) -> str:
    mode, warps, tile = setting
    return f"{mode}, warps {warps or 'auto'}, tile {tile or 'auto'}"


class _StageBench:
    """One role's stage as a CUDA graph over all layers (bench/decode_stages.py's stages),
    under a `DecodeTuning.quant` entry for that role."""

    def __init__(self, model: Any) -> None:
        cfg = model.cfg
        self.model = model
        self.cfg = cfg
        dt, dev = torch.bfloat16, "cuda"
        width = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * cfg.head_dim
        self.h = torch.randn(1, cfg.hidden_size, device=dev, dtype=dt)
        self.attn = torch.randn(1, cfg.num_attention_heads * cfg.head_dim, device=dev, dtype=dt)
        self.act = torch.randn(1, cfg.intermediate_size, device=dev, dtype=dt)
        self.qkv_width = width
        self.tokens = torch.zeros(1, dtype=torch.int64, device=dev)
        self.pos = torch.zeros(1, dtype=torch.int32, device=dev)
        self.lens = torch.ones(1, dtype=torch.int32, device=dev)

    def time(self, role: Role, setting: tuple[str, int, int]) -> float:
        """Microseconds per layer (the head: per call) of `role`'s stage with `setting`."""
        from evokernel.bench.decode_stages import graph_us
        from evokernel.ops.registry import OpSet
        from evokernel.ops.tuning import DEFAULT

        ops = OpSet.triton(None, DEFAULT._replace(quant=((*role.key, *setting),)))
        fn = self._stage(ops, role)
        per = 1 if role.op == "head" else self.cfg.num_hidden_layers
        return graph_us(fn, REPS) / per

    def _stage(self, ops: Any, role: Role) -> Callable[[], object]:
        w, eps = self.model.weights, self.cfg.rms_norm_eps
        layers = list(w.layers)
        h = self.h
        if role.name == "qkv":
            return lambda: [ops.norm_linear(h, lw.input_norm, lw.qkv_proj, eps, lw.qkv_bias)
                            for lw in layers]  # fmt: skip
        if role.name == "o_proj":
            return lambda: [ops.linear_residual(self.attn, lw.o_proj, h) for lw in layers]
        if role.name == "gate_up":
            return lambda: [ops.norm_gate_up_silu(h, lw.post_attn_norm, lw.gate_up_proj, eps)
                            for lw in layers]  # fmt: skip
        if role.name == "down":
            return lambda: [ops.linear_residual(self.act, lw.down_proj, h) for lw in layers]
        return lambda: ops.greedy_head(h, w.final_norm, w.lm_head, eps, self.tokens, self.pos,
                                       self.lens)  # fmt: skip


def confirm_launch(pack: Pack, model_dir: Path, device: str, stream: TextIO | None = None) -> Pack:
    """`pack` with each changed role's choice kept only where the whole step is faster with
    it, and the kept ones run by the engine only where the whole step confirms them together
    (see the module doc); rewritten in place."""
    q = pack.quantized
    if q is None or q.rule != RULE:  # nothing measured, or nothing differs from the table
        return pack
    out = stream or sys.stdout
    cfg = ModelConfig.from_dir(model_dir)
    limit = cfg.max_position_embeddings
    from evokernel.engine.graph import context_buckets

    firsts = [1] + [b + 1 for b in context_buckets(limit)[:-1]]
    every = [p for p in firsts if p + CONFIRM_STEPS_MARGIN < limit]
    screen = [p for p in SCREEN_POSITIONS if p in every] or every[:1]
    with _Pairs(pack, model_dir, device, max(every), out) as pairs:
        kept = []
        for c in q.choices:
            if (c.mode, c.warps, c.tile_bytes) == c.table_setting:
                kept.append(c)
                continue
            alone = [d if d is c else d.as_table() for d in q.choices]
            checks = pairs.measure(alone, screen, f"{c.role} alone")
            if _verdict(checks):
                kept.append(c)
            else:
                print(f"quantized launch {c.role}: faster as a stage, not in the whole step; "
                      "the table's stays", file=out)  # fmt: skip
                kept.append(c.as_table())
        changed = [c for c in kept if (c.mode, c.warps, c.tile_bytes) != c.table_setting]
        checks = pairs.measure(kept, every, "together") if changed else []
    ok = bool(changed) and _verdict(checks)
    if not ok:
        print("quantized launches: not faster end to end; the table's choices stay", file=out)
    record = tuple({k: c[k] for k in ("position", "speedup", "ci", "control_ci")} for c in checks)
    launch = dataclasses.replace(q, choices=tuple(kept), kept=ok, end_to_end=record)
    return _save(pack, launch)


SCREEN_POSITIONS = (1, 1025, 8193)  # where each changed role is first tried alone
CONFIRM_STEPS_MARGIN = 64  # positions past a confirmation's start that the steps need


def _verdict(checks: list[dict[str, Any]]) -> bool:
    """Faster at some position beyond the control pair, and slower at none."""
    from evokernel.tune.confirm import control_floor

    faster = any(c["error"] is None and c["ci"][0] > control_floor(c["control_ci"]) for c in checks)
    slower = any(
        c["error"] is not None or c["ci"][1] < min(1.0, (c["control_ci"] or [1.0])[0])
        for c in checks
    )
    return faster and not slower


class _Pairs:
    """The engine without a pack and its control copy, loaded once; `measure` loads the engine
    with a trial pack of the given choices and times it against them, interleaved."""

    def __init__(self, pack: Pack, model_dir: Path, device: str, top: int, out: TextIO) -> None:
        self.pack, self.model_dir, self.device, self.out = pack, model_dir, device, out
        self.need = top + CONFIRM_STEPS_MARGIN
        self.dtype = getattr(torch, str(pack.model.get("dtype")))
        self.cfg = ModelConfig.from_dir(model_dir)
        self.systems: list[Any] = []
        self.controls: dict[int, dict[str, Any]] = {}

    def __enter__(self) -> _Pairs:
        from evokernel.bench.paired import control_copy
        from evokernel.bench.systems import load_system

        for _ in range(2):
            self.systems.append(load_system("evokernel", self.model_dir, self.device,
                                            self.dtype, self.need, None, None))  # fmt: skip
        self.plain, self.control = self.systems[0], control_copy(self.systems[1])
        return self

    def __exit__(self, *exc: object) -> None:
        for system in self.systems:
            system.close()

    def measure(self, choices: list[QuantChoice], positions: list[int], what: str) -> list[dict]:
        from evokernel.bench.paired import measure_pair, pair_line
        from evokernel.bench.stepping import CellPlan, prompt_ids
        from evokernel.bench.systems import load_system
        from evokernel.tune.confirm import CONFIRM_ROUNDS, CONFIRM_STEPS, CONFIRM_WARMUP

        q = self.pack.quantized
        assert q is not None
        trial = _save(self.pack, dataclasses.replace(q, choices=tuple(choices), kept=True))
        tuned = load_system("evokernel_pack", self.model_dir, self.device, self.dtype,
                            self.need, None, trial.path)  # fmt: skip
        checks = []
        try:
            for p in positions:
                plan = CellPlan(p, CONFIRM_STEPS, CONFIRM_WARMUP, 0.0)
                prompt = prompt_ids(self.cfg.vocab_size, p)
                if p not in self.controls:
                    self.controls[p] = measure_pair(self.plain, self.control, prompt, plan,
                                                    self.device, rounds=CONFIRM_ROUNDS)  # fmt: skip
                same = self.controls[p]
                got = measure_pair(self.plain, tuned, prompt, plan, self.device,
                                   rounds=CONFIRM_ROUNDS)  # fmt: skip
                print(f"confirm quantized launches ({what}): {pair_line(got)}; control "
                      f"{pair_line(same).split(': ', 1)[-1]}", file=self.out)  # fmt: skip
                checks.append({"position": p, "speedup": got["speedup"], "ci": got["ci"],
                               "control_ci": same["ci"],
                               "error": got["error"] or same["error"]})  # fmt: skip
        finally:
            tuned.close()
        return checks


def _save(pack: Pack, launch: QuantLaunch) -> Pack:
    from evokernel.tune.write import save_pack

    return save_pack(dataclasses.replace(pack, quantized=launch), _sources(pack))


def _sources(pack: Pack) -> dict[str, str]:
    return {p.relative_to(pack.path).as_posix(): p.read_text() for p in pack.programs()}


__all__ = ["RULE", "Role", "confirm_launch", "roles", "search_launch", "settings"]
