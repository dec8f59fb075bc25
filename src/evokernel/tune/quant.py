"""`tune` on a quantized checkpoint: measure the packed kernels' launch choices on its own
weights, and keep each only in the context buckets where the whole decode step confirms it.

    launch = search_launch(model_dir, device, stream, deadline)       # QuantLaunch (kept: False)
    pack = confirm_launch(pack, model_dir, device, stream, deadline)  # per bucket, end to end

Why: ops/quant.py picks each packed projection's dequantisation mode and warps from a table
measured at two model shapes (`CHOICES`); at other shapes a wrong choice cost up to 1.45x on
an H100, and the best one moves with K. The decode_layer task cannot search these (its
programs take dense projections), so a quantized checkpoint's pack carries these choices
instead of layer programs (pack.json `quantized`; the engine runs them as
`DecodeTuning.quant` entries, per bucket, engine/packs/dispatch.py `quant_ops`).

Roles: the checkpoint's packed projection kinds, qkv, o_proj, gate_up, down and head, each
keyed by what `choice` keys on (format, op, K); two roles with one key are measured as one.
The declared space (ops/quant.py): the dequantisation modes `modes(w, op)` (the 4-bit
per-value passes left out above K 1,024: the known-bad region is never sampled), `WARPS`,
and `TILE_BYTES` (`HEAD_TILES` for the head). Each role is searched coordinate-wise from the
table's setting, the other roles at theirs: every mode, then every warps value with the best
mode, then every tile (about ten settings rather than the product), twice, by two measures
that disagree and that each miss what the other finds (H100, Qwen3-0.6B):
  stage search  the role's stage as a CUDA graph over all layers (distinct weights: L2 cold),
                `STAGE_REPS` replays, the median; a setting wins by > `STAGE_MARGIN`. It found
                an FP8 down_proj setting worth 2-3% of the step, and proposed INT8 and INT4
                settings 2-8% faster as stages that made the step 0.5-7% slower (likely,
                not profiled: larger tiles hold more registers, so a kernel's programs
                start later beside the previous kernel's under programmatic dependent
                launch).
  step search   the whole greedy step as the engine runs it (one CUDA graph at position
                `STEP_POSITION`), the incumbent's and the setting's graphs replayed paired
                (`_StepBench.ratio`); a setting wins by > `STEP_MARGIN`. It found an INT4 qkv
                setting 12% faster at position 1 and 0.7% slower at 1,025; it missed the FP8
                down_proj one (separately captured graphs differ by 1-5%).
A setting that fails to build (registers, shared memory) is skipped and said.

Confirmation (GPU), by the engine's own end-to-end measure: the engine with and without the
settings, timed interleaved (bench/paired.py, as tune/confirm.py times programs), at the
first position of every engine context bucket up to `SCREEN_MAX`, each beside a control pair
(the engine against a second copy of itself). Every proposed setting is timed alone; each
bucket then takes, per role, the setting faster alone there by the most (beyond the control),
and all buckets' settings are timed together: a bucket not faster there too keeps nothing, and
one that took several keeps only its single best where they were not faster together, or
gained less than it alone (that single best is then timed with the rest once more, and kept
only if faster then). Settings each faster alone can be slower together (INT4 gate_up and
down_proj on an H100: +5.4% and +1.3% alone at position 513, -2.4% together), so a bucket
runs settings only where its last measure agrees. Buckets past `SCREEN_MAX` run the table
(the GEMVs' share of the step is small there). The head's setting runs in every bucket or
none (the head op is not chosen per bucket): only if faster alone somewhere and slower
nowhere. On the CPU nothing is timed: every role records the table's setting and the pack
runs none.

Budget: `deadline` (time.monotonic(), None: none) bounds the search: no setting is measured
after it (one in flight finishes), roles not reached record the table's setting alone, and a
confirmation that would start after it does not, so the pack keeps nothing unconfirmed.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch

from evokernel.engine.packs.format import Entries, Pack, QuantChoice, QuantLaunch
from evokernel.model.config import ModelConfig
from evokernel.model.weights import PackedWeight

STAGE_REPS = 30
STAGE_MARGIN = 0.02  # a setting must beat the incumbent's stage by more than this
STEP_POSITION = 1  # where the step search times the step (its cache row and bucket)
STEP_CACHE = 64
BLOCK = 20  # replays back to back per timed block
ROUNDS = 7
STEP_MARGIN = 0.003  # a setting must beat the incumbent's step by more than this
SCREEN_MAX = 4097  # confirmation positions: each bucket's first, up to this one
RULE = (
    "per role, the settings a stage search and a step search propose (coordinate-wise over "
    "modes, warps and tiles from the table's); per bucket up to position "
    f"{SCREEN_MAX}, the fastest setting per role that made the whole step faster alone, "
    "timed interleaved against the engine without it beyond a control pair, kept only where "
    "the buckets' settings timed together are faster there too; the head's in every bucket "
    "or none"
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


def _spent(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def search_launch(
    model_dir: Path, device: str, stream: TextIO | None = None, deadline: float | None = None
) -> QuantLaunch:
    """Every role's table setting and what the two searches propose for it: measured on a
    GPU until `deadline`; on the CPU the table's alone."""
    from evokernel.engine.loading import load_engine

    out = stream or sys.stdout
    if device != "cuda":
        model = load_engine(model_dir, device, None, "torch", max_seq_len=8)
        listed = [QuantChoice(r.name, *r.key, *table_choice(r), table=table_choice(r),
                              source="table") for r in roles(model.weights)]  # fmt: skip
        print(f"quantized launches: {len(listed)} roles, not timed on the CPU", file=out)
        return QuantLaunch(tuple(listed), kept=False, rule=CPU_RULE)
    model = load_engine(model_dir, device, torch.bfloat16, "torch", max_seq_len=STEP_CACHE)
    benches = (("stage search", _StageBench(model)), ("step search", _StepBench(model)))
    choices = _search_roles(roles(model.weights), benches, out, deadline)
    changed = any(c.source != "table" for c in choices)
    return QuantLaunch(tuple(choices), kept=False, rule=RULE if changed else SAME_RULE)


def _search_roles(
    found: list[Role], benches: tuple[tuple[str, Any], ...], out: TextIO, deadline: float | None
) -> list[QuantChoice]:
    """Each role's table choice, then what each bench proposes for it (until `deadline`)."""
    tables = {r.key: table_choice(r) for r in found}
    choices: list[QuantChoice] = []
    unsearched = []
    for role in found:
        table = tables[role.key]
        choices.append(QuantChoice(role.name, *role.key, *table, table=table, source="table"))
        if _spent(deadline):
            unsearched.append(role.name)
            continue
        for source, bench in benches:
            if _spent(deadline):  # not even the incumbent is measured
                break
            best, us, table_us = _coordinate(bench, role, tables, out, deadline)
            print(f"quantized launch {role.name} ({'/'.join(map(str, role.key))}), {source}: "
                  f"{_text(best)} {us:.2f} us; the table's {_text(table)} {table_us:.2f} us",
                  file=out)  # fmt: skip
            if best != table and all(c.setting != best for c in choices if c.role == role.name):
                choices.append(QuantChoice(role.name, *role.key, *best, us=round(us, 2),
                                           table_us=round(table_us, 2), table=table,
                                           source=source))  # fmt: skip
    if unsearched:
        print(f"quantized launches: the budget was spent; not searched, the table's setting: "
              f"{', '.join(unsearched)}", file=out)  # fmt: skip
    return choices


Setting = tuple[str, int, int]  # (mode, warps, tile bytes)


def _coordinate(
    bench: _StageBench | _StepBench, role: Role, tables: dict[tuple[str, str, int], Setting],
    out: TextIO, deadline: float | None = None,
) -> tuple[Setting, float, float]:  # fmt: skip
    """`role`'s best setting by `bench`, coordinate-wise from the table's, every other role
    at the table's: (setting, its time, the table's time) in the bench's unit. No setting is
    tried after `deadline`."""
    table = best = tables[role.key]
    incumbent = bench.prepare(role, tables, table)
    table_us = best_us = bench.time(incumbent)
    for stage in ("mode", "warps", "tile"):
        for setting in settings(role, best[0], best[1], stage):
            if _spent(deadline):
                return best, best_us, table_us
            if setting == best:
                continue
            try:  # built (and, for the stage bench, timed) here
                trial = bench.prepare(role, tables, setting)
                wins = bench.better(incumbent, trial)
            except Exception as err:  # a setting that cannot be built here: skipped
                print(f"  {role.name} {_text(setting)}: skipped ({type(err).__name__}: "
                      f"{' '.join(str(err).split())[:120]})", file=out)  # fmt: skip
                continue
            if wins:
                best, incumbent = setting, trial
                best_us = bench.time(incumbent)
    return best, best_us, table_us


def _text(setting: Setting) -> str:
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
        self.h = torch.randn(1, cfg.hidden_size, device=dev, dtype=dt)
        self.attn = torch.randn(1, cfg.num_attention_heads * cfg.head_dim, device=dev, dtype=dt)
        self.act = torch.randn(1, cfg.intermediate_size, device=dev, dtype=dt)
        self.tokens = torch.zeros(1, dtype=torch.int64, device=dev)
        self.pos = torch.zeros(1, dtype=torch.int32, device=dev)
        self.lens = torch.ones(1, dtype=torch.int32, device=dev)

    def prepare(
        self, role: Role, tables: dict[tuple[str, str, int], Setting], setting: Setting
    ) -> tuple[Role, Setting]:
        """What `time` builds and times: the role's stage alone (no other role runs)."""
        return (role, setting)

    def time(self, trial: tuple[Role, Setting]) -> float:
        """Microseconds per layer (the head: per call) of the role's stage at the setting."""
        from evokernel.bench.decode_stages import graph_us
        from evokernel.ops.registry import OpSet
        from evokernel.ops.tuning import DEFAULT

        role, setting = trial
        ops = OpSet.triton(None, DEFAULT._replace(quant=((*role.key, *setting),)))
        fn = self._stage(ops, role)
        per = 1 if role.op == "head" else self.cfg.num_hidden_layers
        return float(graph_us(fn, STAGE_REPS)) / per

    def better(self, incumbent: tuple[Role, Setting], trial: tuple[Role, Setting]) -> bool:
        return self.time(trial) < self.time(incumbent) * (1 - STAGE_MARGIN)

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


class _StepBench:
    """The whole greedy decode step as the engine runs it (one CUDA graph, batch 1, from
    position `STEP_POSITION`, random KV cache) under given `DecodeTuning.quant` entries. Two
    graphs are compared paired: `ROUNDS` rounds, each replaying both `BLOCK` times back to
    back in alternating order; the ratio of the medians of their per-replay times."""

    def __init__(self, model: Any) -> None:
        from evokernel.engine.graph import context_buckets

        self.model = model
        self.cache = model.new_cache(1, STEP_CACHE)
        for t in (*self.cache.k, *self.cache.v):
            t.normal_()
        self.tokens = torch.zeros(1, dtype=torch.int64, device="cuda")
        self.pos = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.lens = torch.ones(1, dtype=torch.int32, device="cuda")
        self.bound = next(b for b in context_buckets(STEP_CACHE) if b >= STEP_POSITION + BLOCK)

    def reset(self) -> None:
        self.pos.fill_(STEP_POSITION - 1)
        self.lens.fill_(STEP_POSITION)

    def prepare(
        self, role: Role, tables: dict[tuple[str, str, int], Setting], setting: Setting
    ) -> Any:
        """The step's graph with `role` at `setting`, the other roles at `tables`."""
        return self.graph(tuple((*k, *(setting if k == role.key else v))
                                for k, v in tables.items()))  # fmt: skip

    def time(self, graph: Any) -> float:
        return self.step_us(graph)

    def better(self, incumbent: Any, trial: Any) -> bool:
        return self.ratio(incumbent, trial) < 1 - STEP_MARGIN

    def graph(self, entries: Entries) -> Any:
        from evokernel.bench.decode_stages import capture
        from evokernel.ops.registry import OpSet
        from evokernel.ops.tuning import DEFAULT

        m = self.model
        m.ops = OpSet.triton(None, DEFAULT._replace(quant=entries))
        return capture(
            lambda: m.decode_greedy(self.tokens, self.pos, self.lens, self.cache, self.bound),
            self.reset,
        )

    def _block_us(self, graph: Any) -> float:
        self.reset()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(BLOCK):
            graph.replay()
        b.record()
        b.synchronize()
        return float(a.elapsed_time(b)) * 1e3 / BLOCK

    def step_us(self, graph: Any) -> float:
        self._block_us(graph)
        return statistics.median(self._block_us(graph) for _ in range(ROUNDS))

    def ratio(self, base: Any, trial: Any) -> float:
        """trial / base step time (< 1: the trial is faster)."""
        self._block_us(base)
        self._block_us(trial)
        of_base: list[float] = []
        of_trial: list[float] = []
        for i in range(ROUNDS):
            pair = ((base, of_base), (trial, of_trial))
            for graph, times in pair if i % 2 else pair[::-1]:
                times.append(self._block_us(graph))
        return statistics.median(of_trial) / statistics.median(of_base)


def confirm_launch(
    pack: Pack, model_dir: Path, device: str, stream: TextIO | None = None,
    deadline: float | None = None,
) -> Pack:  # fmt: skip
    """`pack` with, per engine context bucket, the proposed settings the whole step confirms
    there (see the module doc); rewritten in place. Past `deadline` nothing is confirmed: the
    pack keeps none (unchanged)."""
    from evokernel.engine.graph import context_buckets

    q = pack.quantized
    if q is None or all(c.source == "table" for c in q.choices):  # nothing proposed
        return pack
    out = stream or sys.stdout
    if _spent(deadline):
        print("quantized launches: the budget was spent before their confirmation: the pack "
              "keeps none (the table's settings run)", file=out)  # fmt: skip
        return pack
    cfg = ModelConfig.from_dir(model_dir)
    limit = cfg.max_position_embeddings
    bounds = context_buckets(limit)
    firsts = [1] + [b + 1 for b in bounds[:-1]]
    positions = [p for p in firsts if p <= SCREEN_MAX and p + CONFIRM_STEPS_MARGIN < limit]
    if not positions:
        return pack
    proposed = [i for i, c in enumerate(q.choices) if c.source != "table"]
    none: list[list[int]] = [[] for _ in positions]

    def launch(rows: list[list[int]], head: list[int]) -> QuantLaunch:
        """Bucket j runs rows[j] (none past the measured buckets), every bucket `head`."""
        table = tuple((b, (*(rows[j] if j < len(rows) else ()), *head))
                      for j, b in enumerate(bounds))  # fmt: skip
        return dataclasses.replace(q, kept=True, dispatch=table)

    with _Pairs(pack, model_dir, device, max(positions), out) as pairs:
        alone = {}
        for i in proposed:
            c = q.choices[i]
            trial = launch(none, [i]) if c.op == "head" else launch([[i] for _ in positions], [])
            alone[i] = pairs.measure(trial, positions, f"{c.role} {_text(c.setting)} alone")
        chosen = _per_bucket(q.choices, proposed, alone, len(positions))
        best = _per_bucket(q.choices, proposed, alone, len(positions), 1)
        head = _head_choice(q.choices, proposed, alone)
        checks = alone[head[0]] if head else []
        for attempt in range(
            2
        ):  # each bucket keeps its settings only where its last measure agrees
            if not any(chosen):
                break
            checks = pairs.measure(launch(chosen, head), positions, f"together, pass {attempt + 1}")
            slow = [j for j, check in enumerate(checks) if chosen[j] and not _faster(check)]
            if attempt == 0:  # several settings that gain less together than the best alone
                slow += [j for j, check in enumerate(checks) if len(chosen[j]) > 1 and j not in slow
                         and check["speedup"] < alone[best[j][0]][j]["speedup"]]  # fmt: skip
            for j in slow:  # a second pass tries the best alone where several did not do
                chosen[j] = best[j] if attempt == 0 and len(chosen[j]) > 1 else []
            if not any(chosen[j] for j in slow):
                break
    for j, p in enumerate(positions):
        names = [f"{q.choices[i].role} {_text(q.choices[i].setting)}" for i in chosen[j] + head]
        print(f"quantized launches, bucket <= {bounds[j]} (position {p}): "
              f"{', '.join(names) or 'the table'}", file=out)  # fmt: skip
    record = tuple({k: c[k] for k in ("position", "speedup", "ci", "control_ci")} for c in checks)
    final = launch(chosen, head)
    return _save(pack, dataclasses.replace(final, kept=final.runs, end_to_end=record))


CONFIRM_STEPS_MARGIN = 64  # positions past a confirmation's start that the steps need


def _faster(check: dict[str, Any]) -> bool:
    """Faster than the engine without the choices, beyond the control pair."""
    from evokernel.tune.confirm import control_floor

    return check["error"] is None and check["ci"][0] > control_floor(check["control_ci"])


def _slower(check: dict[str, Any]) -> bool:
    control = check["control_ci"] or [1.0, 1.0]
    return check["error"] is not None or check["ci"][1] < min(1.0, control[0])


def _per_bucket(
    choices: tuple[QuantChoice, ...], proposed: list[int], alone: dict[int, list[dict[str, Any]]],
    buckets: int, most: int = 0,
) -> list[list[int]]:  # fmt: skip
    """Per measured bucket, the proposed settings it runs besides the head's: per role the one
    faster alone there by the most (at most `most` in all when set, the fastest first)."""
    rows = []
    for j in range(buckets):
        best: dict[str, tuple[float, int]] = {}
        for i in proposed:
            c, check = choices[i], alone[i][j]
            top = c.role not in best or check["speedup"] > best[c.role][0]
            if c.op != "head" and _faster(check) and top:
                best[c.role] = (check["speedup"], i)
        row = [i for _, i in sorted(best.values(), reverse=True)]
        rows.append(row[:most] if most else row)
    return rows


def _head_choice(
    choices: tuple[QuantChoice, ...], proposed: list[int], alone: dict[int, list[dict[str, Any]]]
) -> list[int]:
    """The head's setting, run in every bucket (the head op is not chosen per bucket): the one
    faster alone by the most among those faster somewhere and slower nowhere; [] if none."""
    fit = [i for i in proposed if choices[i].op == "head" and _verdict(alone[i])]
    return sorted(fit, key=lambda i: -max(c["speedup"] for c in alone[i]))[:1]


def _verdict(checks: list[dict[str, Any]]) -> bool:
    """Faster at some position beyond the control pair, and slower at none."""
    return any(_faster(c) for c in checks) and not any(_slower(c) for c in checks)


class _Pairs:
    """The engine without a pack and its control copy, loaded once; `measure` loads the engine
    with a trial pack of the given launch and times it against them, interleaved."""

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

    def measure(self, launch: QuantLaunch, positions: list[int], what: str) -> list[dict]:
        from evokernel.bench.paired import measure_pair, pair_line
        from evokernel.bench.stepping import CellPlan, prompt_ids
        from evokernel.bench.systems import load_system
        from evokernel.tune.confirm import CONFIRM_ROUNDS, CONFIRM_STEPS, CONFIRM_WARMUP

        trial = _save(self.pack, launch)
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
