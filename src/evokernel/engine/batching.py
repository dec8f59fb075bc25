"""Continuous batching: decode steps over a fixed set of KV slots that sequences join and leave.

    runner = BatchRunner(model, max_batch=32, max_len=4096)      # KV checked, graphs captured
    slot, first = runner.admit(prompt_ids, RowParams())           # prefill, first token
    slots, firsts = runner.admit_many([(ids, RowParams()), ...])  # several at once
    pending = runner.step()                                        # one token per active slot
    out = pending.wait()                                           # tokens of pending.slots
    runner.release(slot)

Slots. The KV cache (engine/cache.py) has `max_batch` rows of `max_len` positions; a sequence
owns one row (its slot) from `admit` to `release`. `admit` prefills the prompt into its row and
samples the first token; the slot decodes from the next `step` on. Each prompt row is computed
as it would be alone (batch rows never mix), so only the summation order of a batched launch
can differ. Free slots are taken lowest first, so the active rows stay packed at the bottom;
`compact()` moves sequences down into holes when that lowers the batch bucket.

Steps. A step runs the model's decode over rows 0..b-1, b the smallest batch bucket (1, 2, 4,
... and `max_batch`) holding the highest active slot: idle rows inside it compute a junk token
at position 0 of their free row (nothing reads it: a prefill overwrites a row before a
sequence reads it) and are put back to position 0 after the step by an `active` mask. State
lives in static device buffers (tokens [B] int64, positions [B] int32, seq_lens [B] int32,
active [B] int32, per-row sampling parameters), so on CUDA every step is a replay of one CUDA
graph per (kind, batch bucket, context bucket), all captured once when the runner is built.
Two kinds: `greedy` ends in the model's `decode_greedy` (next tokens written on the device, no
logits), used while every active row is greedy without logprobs; `logits` returns [b, V]
float32 logits, from which each row draws its token with its own parameters
(engine/row_sampling.py) outside the graph. The context bucket is the smallest bound in
`context_buckets(max_len)` above every active row's next position; the host tracks positions,
so choosing a graph needs no sync.

Prefill. Eager, a prefill is hundreds of launches, each paying the host's launch cost (about
14 ms for any short prompt of Qwen3-0.6B on an H100, while every running sequence waits).
Without `staged_prefill` each prompt is prefilled alone, unpadded, straight into its slot's
row. With it (on wherever steps are graphs) a prompt of T tokens runs in a CUDA graph over a
length bucket (16, 32, 64, ... up to max_len) holding T, and the prompts `admit_many` takes of
one bucket share the graph, up to `prefill_rows` of them (a short prompt's prefill costs about
what a decode step does whatever its rows hold, so n prompts together cost little more than
one). Each graph (`prefill_shapes`: n prompts of one bucket, n a power of two, n x bucket <=
the staging capacity) prefills n prompts, right-padded with id 0 in a static buffer, their
lengths in another, into a staging area of the cache (`stage_rows` rows after the slots, never
a slot: `prefill_tokens` positions rounded up to whole rows, at most `prefill_rows` rows, seen
as n rows of `bucket` positions); then
positions 0..T-1 of each staging row are copied into its slot's row. A group whose size has no
graph is padded up to the next size with one-token rows nobody reads where that size holds at
most `PAD_TOKENS` tokens (there a launch costs about the same for any n: it is latency-bound),
else split (5 = 4 + 1). Padding positions come after every real one and attention is causal,
so they never reach a real token; each prompt's logits are those of its row T-1.

Rows per call. Fused decode kernels may take a bounded number of rows per launch
(`row_limit`); a step over more rows calls the model once per group of that many rows, each on
a view of those cache rows, inside the same graph (each group reads the weights once).

Nothing waits for the device: `admit` and `step` return a `PendingTokens` whose host copy is
under way (pinned memory, an event); `wait()` blocks on that event only. A caller may launch
step i+1 before waiting for step i, as long as it waits in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from evokernel.engine.cache import KVCache
from evokernel.engine.decoder import DecoderModel
from evokernel.engine.graph import context_buckets
from evokernel.engine.kv_plan import check_kv_fits
from evokernel.engine.row_sampling import RowTable, draw_noise, logprobs, sample_rows
from evokernel.engine.work_clock import WorkClock

WARMUP_STEPS = 2
PREFILL_ROWS = 8  # prompts of one length bucket prefilled together at most (staged)
PAD_TOKENS = 2048  # a group is padded up to a captured size holding at most this many tokens
GREEDY, LOGITS = "greedy", "logits"


@dataclass(frozen=True)
class RowParams:
    """How one sequence picks its tokens."""

    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    seed: int | None = None  # None: the runner's shared generator
    logprobs: int | None = None  # None: none; k >= 0: the token's and the k most likely

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    @property
    def masks(self) -> bool:
        return self.top_k > 1 or self.top_p < 1


@dataclass
class TokenOut:
    """The tokens of one launch for its slots, in order; logprob fields per row or None."""

    tokens: list[int]
    logprobs: list[float | None]
    top: list[list[tuple[int, float]] | None]


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, ... below max_batch, then max_batch."""
    sizes, b = [], 1
    while b < max_batch:
        sizes.append(b)
        b *= 2
    return [*sizes, max_batch]


def prefill_buckets(max_len: int) -> list[int]:
    """Prompt lengths the staged prefill pads to: 16, 32, 64, ... below max_len, then
    max_len."""
    sizes, n = [], 16
    while n < max_len:
        sizes.append(n)
        n *= 2
    return [*sizes, max_len]


def prefill_shapes(max_len: int, max_rows: int, capacity: int = 0) -> list[tuple[int, int]]:
    """(prompts, length bucket) of the staged prefills: every bucket with one prompt, and
    with 2, 4, ... up to `max_rows` prompts where they fit the staging area's `capacity`
    positions together (at least max_len)."""
    capacity = max(capacity, max_len)
    shapes = []
    for bucket in prefill_buckets(max_len):
        n = 1
        while n <= max_rows and n * bucket <= capacity:
            shapes.append((n, bucket))
            n *= 2
    return shapes


def stage_rows(max_len: int, prefill_tokens: int) -> int:
    """Cache rows of the staging area: `prefill_tokens` positions, and at least one row."""
    return max(1, -(-prefill_tokens // max_len))


def stage_view(stage: KVCache, n: int, bucket: int) -> KVCache:
    """The staging rows' K and V (contiguous: rows are the outer dimension) seen as n rows
    of `bucket` positions."""

    def view(t: torch.Tensor) -> torch.Tensor:
        _, hkv, _, d = t.shape
        return t.reshape(-1)[: n * hkv * bucket * d].view(n, hkv, bucket, d)

    return KVCache(k=[view(t) for t in stage.k], v=[view(t) for t in stage.v])


def row_limit(model: DecoderModel) -> int | None:
    """Rows one decode launch takes: the fused kernels' bound when any decode op runs them."""
    origins = model.ops.origin.values()
    if any(o.startswith(("triton", "pack:")) for o in origins):
        from evokernel.ops.grid import MAX_ROWS

        return MAX_ROWS
    return None


def cache_rows(cache: KVCache, start: int, stop: int) -> KVCache:
    """A view of rows start..stop-1 of `cache` (contiguous: rows are the outer dimension)."""
    return KVCache(k=[t[start:stop] for t in cache.k], v=[t[start:stop] for t in cache.v])


class PendingTokens:
    """Tokens (and logprobs) of one launch on their way to the host."""

    def __init__(
        self,
        slots: tuple[int, ...],
        rows: list[int],
        tokens: torch.Tensor,
        lp: tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor] | None,
        tops: list[int | None],
        event: torch.cuda.Event | None,
    ) -> None:
        self.slots = slots
        self._rows = rows  # row of each slot in `tokens`
        self._tokens = tokens
        self._lp = lp
        self._tops = tops
        self._event = event

    def wait(self) -> TokenOut:
        if self._event is not None:
            self._event.synchronize()
        flat = self._tokens.tolist()
        out = TokenOut(
            [flat[r] for r in self._rows], [None] * len(self.slots), [None] * len(self.slots)
        )
        if self._lp is not None:
            rows, chosen, ids, values = self._lp
            where = {r: i for i, r in enumerate(rows)}
            c, i_, v = chosen.tolist(), ids.tolist(), values.tolist()
            for n, r in enumerate(self._rows):
                j = where.get(r)
                if j is None:
                    continue
                out.logprobs[n] = c[j]
                k = self._tops[n] or 0
                out.top[n] = list(zip(i_[j][:k], v[j][:k]))
        return out


class BatchRunner:
    """Decode over `max_batch` KV slots; see the module doc."""

    def __init__(
        self,
        model: DecoderModel,
        max_batch: int,
        max_len: int,
        *,
        use_graph: bool | None = None,
        rows_per_call: int | None = None,
        seed: int = 0,
        staged_prefill: bool | None = None,
        prefill_rows: int = PREFILL_ROWS,
        prefill_tokens: int = 0,
    ) -> None:
        assert max_batch >= 1 and 1 <= max_len <= model.max_seq_len, (max_batch, max_len)
        dev = model.device
        self.model = model
        self.max_batch = max_batch
        self.max_len = max_len
        self.cuda = dev.type == "cuda"
        self.use_graph = self.cuda if use_graph is None else use_graph
        assert not self.use_graph or self.cuda, "CUDA graphs need a CUDA device"
        self.rows_per_call = rows_per_call or row_limit(model) or max_batch
        self.batch_sizes = batch_buckets(max_batch)
        self.bounds = context_buckets(max_len)
        self.staged = self.use_graph if staged_prefill is None else staged_prefill
        self.prefill_lens = prefill_buckets(max_len) if self.staged else []
        self.prefill_rows = max(1, min(prefill_rows, max_batch)) if self.staged else 1
        # no launch holds more than prefill_rows prompts of max_len: a larger budget needs no
        # more staging
        capped = min(prefill_tokens, self.prefill_rows * max_len)
        self.stage_rows = stage_rows(max_len, capped) if self.staged else 0
        capacity = self.stage_rows * max_len  # positions of the staging area
        self.prefill_shapes = (
            prefill_shapes(max_len, self.prefill_rows, capacity) if self.staged else []
        )  # (prompts, length bucket) of each staged prefill
        self.plan = check_kv_fits(
            model, max_batch, max_len, sum(self.batch_sizes) * len(self.bounds), self.stage_rows
        )
        # rows 0..max_batch-1: the slots; then the staged prefill's rows (if any)
        self.cache = model.new_cache(max_batch + self.stage_rows, max_len)
        stage = cache_rows(self.cache, max_batch, max_batch + self.stage_rows)
        self._stage_views = {shape: stage_view(stage, *shape) for shape in self.prefill_shapes}
        self._prompt = torch.zeros(max(capacity, 1), dtype=torch.int64, device=dev)  # [n, bucket]
        self._prompt_len = torch.ones(self.prefill_rows, dtype=torch.int64, device=dev)
        self._prefill_graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self._prefill_logits: dict[tuple[int, int], torch.Tensor] = {}
        self.tokens = torch.zeros(max_batch, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(max_batch, dtype=torch.int32, device=dev)
        self.seq_lens = torch.ones(max_batch, dtype=torch.int32, device=dev)
        self.active = torch.zeros(max_batch, dtype=torch.int32, device=dev)
        self.table = RowTable.allocate(max_batch, dev)
        self._views = {  # (start, stop) -> cache rows
            (s, e): cache_rows(self.cache, s, e)
            for b in self.batch_sizes
            for s, e in self._groups(b)
        }
        self._pos: dict[int, int] = {}  # active slot -> position its next step writes
        self._params: dict[int, RowParams] = {}
        self._gens: dict[int, torch.Generator] = {}
        self._shared = torch.Generator(device=dev).manual_seed(seed)
        self._graphs: dict[tuple[str, int, int], torch.cuda.CUDAGraph] = {}
        self._logits: dict[tuple[int, int], torch.Tensor] = {}
        self.clock = WorkClock(self.cuda)  # device time of admits and steps (not captures)
        if self.cuda:
            with torch.inference_mode():
                self._capture()

    # -- slots --------------------------------------------------------------------------------

    @property
    def slots(self) -> list[int]:
        return sorted(self._pos)

    @property
    def graph_count(self) -> int:
        return len(self._graphs) + len(self._prefill_graphs)

    @property
    def free(self) -> int:
        return self.max_batch - len(self._pos)

    def position(self, slot: int) -> int:
        return self._pos[slot]

    def admit(self, ids: list[int], params: RowParams) -> tuple[int, PendingTokens]:
        """Prefill `ids` into the lowest free slot and pick its first token."""
        slots, pendings = self.admit_many([(ids, params)])
        return slots[0], pendings[0]

    def admit_many(
        self, prompts: list[tuple[list[int], RowParams]]
    ) -> tuple[list[int], list[PendingTokens]]:
        """Prefill each prompt into a free slot (lowest first, in order) and pick its first
        token; returns the slots, in the prompts' order, and the launches' pending tokens
        (staged: one per group of prompts prefilled together; else one per prompt)."""
        assert 1 <= len(prompts) <= self.free, (len(prompts), self.free)
        for ids, _ in prompts:
            assert 1 <= len(ids) < self.max_len, (len(ids), self.max_len)
        free = sorted(set(range(self.max_batch)) - set(self._pos))
        slots = free[: len(prompts)]
        items = list(zip(slots, prompts))
        if not self.staged:
            return slots, [self._prefill_alone(slot, ids, p) for slot, (ids, p) in items]
        groups: dict[int, list[tuple[int, tuple[list[int], RowParams]]]] = {}
        for item in items:
            bucket = next(n for n in self.prefill_lens if n >= len(item[1][0]))
            groups.setdefault(bucket, []).append(item)
        pendings = []
        for bucket, group in groups.items():
            while group:
                n = self._graph_rows(bucket, len(group))
                pendings.append(self._prefill_together(bucket, group[:n], n))
                group = group[n:]
        return slots, pendings

    def _graph_rows(self, bucket: int, waiting: int) -> int:
        """Rows of the staged prefill that takes the next of `waiting` prompts of `bucket`:
        the next captured size up where it holds at most PAD_TOKENS tokens (the group padded),
        else the largest size that the group fills."""
        sizes = sorted(r for r, b in self.prefill_shapes if b == bucket)
        up = next((r for r in sizes if r >= waiting), None)
        if up is not None and (up == waiting or up * bucket <= PAD_TOKENS):
            return up
        return max(r for r in sizes if r <= waiting)

    def _prefill_alone(self, slot: int, ids: list[int], params: RowParams) -> PendingTokens:
        """The plain prefill: the prompt alone, unpadded, straight into its slot's row."""
        T = len(ids)
        dev = self.model.device
        host = torch.tensor([ids], dtype=torch.int64)
        prompt = host.pin_memory().to(dev, non_blocking=True) if self.cuda else host
        mark = self.clock.start()
        lengths = torch.full((1,), T, dtype=torch.int64, device=dev)
        view = cache_rows(self.cache, slot, slot + 1)
        logits = self.model.prefill(prompt, lengths, view)  # [1, V] float32
        first = self._first_tokens(logits, [(slot, params)])
        self.clock.stop(mark, "prefill", T, T)
        self._start(slot, T)
        return self._readback(first, logits, (slot,), [0])

    def _prefill_together(
        self, bucket: int, items: list[tuple[int, tuple[list[int], RowParams]]], rows: int
    ) -> PendingTokens:
        """The staged prefill of the first min(rows, len(items)) prompts of one length
        bucket over `rows` staging rows: rows past the prompts hold one padding token each,
        and nothing reads them (module doc)."""
        items = items[:rows]
        n = rows
        host = torch.zeros(n, bucket, dtype=torch.int64)
        for b, (_, (ids, _)) in enumerate(items):
            host[b, : len(ids)] = torch.tensor(ids, dtype=torch.int64)
        lengths = torch.ones(n, dtype=torch.int64)
        lengths[: len(items)] = torch.tensor([len(ids) for _, (ids, _) in items])
        if self.cuda:
            host, lengths = host.pin_memory(), lengths.pin_memory()
        mark = self.clock.start()
        self._prompt[: n * bucket].view(n, bucket).copy_(host, non_blocking=True)
        self._prompt_len[:n].copy_(lengths, non_blocking=True)
        graph = self._prefill_graphs.get((n, bucket))
        if graph is not None:
            graph.replay()
            logits = self._prefill_logits[n, bucket]
        else:
            logits = self._prefill_body(n, bucket)
        stage = self._stage_views[n, bucket]
        dst, src = [], []
        for b, (slot, (ids, _)) in enumerate(items):
            T = len(ids)
            dst += [t[slot, :, :T] for t in (*self.cache.k, *self.cache.v)]
            src += [t[b, :, :T] for t in (*stage.k, *stage.v)]
        torch._foreach_copy_(dst, src)
        logits = logits[: len(items)]
        first = self._first_tokens(logits, [(slot, p) for slot, (_, p) in items])
        used = sum(len(ids) for _, (ids, _) in items)
        self.clock.stop(mark, "prefill", used, n * bucket)
        for slot, (ids, _) in items:
            self._start(slot, len(ids))
        return self._readback(first, logits, tuple(s for s, _ in items), list(range(len(items))))

    def _first_tokens(
        self, logits: torch.Tensor, rows: list[tuple[int, RowParams]]
    ) -> torch.Tensor:
        """Each row's first token [n] from its prompt's logits [n, V], drawn with its own
        parameters (set here for its slot), and written as the slot's next input."""
        for slot, params in rows:
            self._set_params(slot, params)
        if all(p.greedy for _, p in rows):
            first = torch.argmax(logits, dim=-1)
        else:
            first = torch.cat(
                [self._pick(logits[b : b + 1], s, s + 1, [s]) for b, (s, _) in enumerate(rows)]
            )
        for b, (slot, _) in enumerate(rows):
            self.tokens[slot : slot + 1].copy_(first[b : b + 1])
        return first

    def _start(self, slot: int, T: int) -> None:
        """`slot` decodes from position T at the next step."""
        self.positions[slot].fill_(T)
        self.seq_lens[slot].fill_(T + 1)
        self.active[slot].fill_(1)
        self._pos[slot] = T

    def release(self, slot: int) -> None:
        """Free `slot` (a pending readback of it stays valid)."""
        del self._pos[slot]
        self._params.pop(slot, None)
        self._gens.pop(slot, None)
        self.active[slot].fill_(0)
        self.positions[slot].fill_(0)
        self.seq_lens[slot].fill_(1)

    def compact(self) -> dict[int, int]:
        """Move sequences from high slots into free low ones when that lowers the batch
        bucket; returns {old slot: new slot}."""
        n = len(self._pos)
        if not n or self._bucket(max(self._pos) + 1) == self._bucket(n):
            return {}
        target = self._bucket(n)
        movers = sorted(s for s in self._pos if s >= target)
        holes = sorted(set(range(target)) - set(self._pos))
        moves = dict(zip(movers, holes))
        for src, dst in moves.items():
            self._move(src, dst)
        return moves

    # -- steps --------------------------------------------------------------------------------

    def step(self) -> PendingTokens | None:
        """One decode step for every active slot (None when there is none)."""
        if not self._pos:
            return None
        slots = tuple(sorted(self._pos))
        b = self._bucket(slots[-1] + 1)
        longest = max(self._pos[s] for s in slots) + 1
        bound = next(x for x in self.bounds if longest <= x)
        params = [self._params[s] for s in slots]
        kind = GREEDY if all(p.greedy and p.logprobs is None for p in params) else LOGITS
        mark = self.clock.start()
        graph = self._graphs.get((kind, b, bound))
        if graph is not None:
            graph.replay()
            logits = self._logits.get((b, bound))
        else:
            logits = self._body(kind, b, bound)
        for s in slots:
            self._pos[s] += 1
        if kind == GREEDY:
            self.clock.stop(mark, "decode", len(slots), b)
            return self._readback(self.tokens[:b], None, slots, list(slots))
        assert logits is not None
        picked = self._pick(logits, 0, b, list(slots))
        self.tokens[:b].copy_(picked)
        self.clock.stop(mark, "decode", len(slots), b)
        return self._readback(picked, logits, slots, list(slots))

    def _pick(self, logits: torch.Tensor, start: int, stop: int, slots: list[int]) -> torch.Tensor:
        """Tokens [stop - start] for rows start..stop-1 of the batch from their logits."""
        params = [self._params[s] for s in slots]
        if all(p.greedy for p in params):
            return torch.argmax(logits, dim=-1)
        gens = {s - start: self._gens[s] for s in slots if s in self._gens}
        noise = draw_noise(tuple(logits.shape), gens, self._shared, logits.device)  # type: ignore[arg-type]
        masks = any(p.masks for p in params)
        return sample_rows(logits, self.table.rows(start, stop), noise, masks=masks)

    def _readback(
        self,
        tokens: torch.Tensor,
        logits: torch.Tensor | None,
        slots: tuple[int, ...],
        rows: list[int],
    ) -> PendingTokens:
        """Start copying tokens (and the logprobs some slots want) to the host."""
        tops = [self._params[s].logprobs for s in slots]
        lp = None
        want = [r for r, k in zip(rows, tops) if k is not None]
        if logits is not None and want:
            top = max(k for k in tops if k is not None)
            index = torch.tensor(want, device=logits.device)
            c, i, v = logprobs(logits.index_select(0, index), tokens.index_select(0, index), top)
            lp = (want, self._host(c), self._host(i), self._host(v))
        host = self._host(tokens)
        event = None
        if self.cuda:
            event = torch.cuda.Event()
            event.record()
        return PendingTokens(slots, rows, host, lp, tops, event)

    def _host(self, t: torch.Tensor) -> torch.Tensor:
        # Into pinned memory, so the copy is asynchronous (to pageable memory it would wait
        # for the step just launched); the event recorded after it says when it has landed.
        if not self.cuda:
            return t.clone()
        return torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t, non_blocking=True)

    # -- internals ----------------------------------------------------------------------------

    def _prefill_body(self, n: int, bucket: int) -> torch.Tensor:
        """The staged prefill of n prompts right-padded to `bucket` -> logits [n, V] (the
        graph's output: read before the next prefill)."""
        ids = self._prompt[: n * bucket].view(n, bucket)
        return self.model.prefill(ids, self._prompt_len[:n], self._stage_views[n, bucket])

    def _bucket(self, rows: int) -> int:
        return next(b for b in self.batch_sizes if rows <= b)

    def _groups(self, b: int) -> list[tuple[int, int]]:
        step = self.rows_per_call
        return [(s, min(s + step, b)) for s in range(0, b, step)]

    def _set_params(self, slot: int, p: RowParams) -> None:
        self._params[slot] = p
        self.table.temperature[slot].fill_(p.temperature)
        self.table.top_k[slot].fill_(p.top_k)
        self.table.top_p[slot].fill_(p.top_p)
        if p.seed is not None and not p.greedy:
            self._gens[slot] = torch.Generator(device=self.model.device).manual_seed(p.seed)
        else:
            self._gens.pop(slot, None)

    def _move(self, src: int, dst: int) -> None:
        length = self._pos[src]
        for t in (*self.cache.k, *self.cache.v):
            t[dst, :, :length].copy_(t[src, :, :length])
        for buf in (self.tokens, self.positions, self.seq_lens, self.active):
            buf[dst : dst + 1].copy_(buf[src : src + 1])
        for buf in (self.table.temperature, self.table.top_k, self.table.top_p):
            buf[dst : dst + 1].copy_(buf[src : src + 1])
        self._pos[dst] = self._pos.pop(src)
        self._params[dst] = self._params.pop(src)
        if src in self._gens:
            self._gens[dst] = self._gens.pop(src)
        self.active[src].fill_(0)
        self.positions[src].fill_(0)
        self.seq_lens[src].fill_(1)

    def _body(self, kind: str, b: int, bound: int) -> torch.Tensor | None:
        """The step over rows 0..b-1 with attention bounded by `bound`; see the module doc."""
        model, out = self.model, []
        for s, e in self._groups(b):
            args = (self.tokens[s:e], self.positions[s:e], self.seq_lens[s:e], self._views[s, e])
            if kind == GREEDY:
                model.decode_greedy(*args, bound)
            else:
                out.append(model.decode(*args, bound))
        positions, seq_lens, active = self.positions[:b], self.seq_lens[:b], self.active[:b]
        if kind == GREEDY:
            positions.mul_(active)  # decode_greedy advanced every row: idle rows back to 0
        else:
            positions.add_(active)
        torch.add(positions, 1, out=seq_lens)
        if kind == GREEDY:
            return None
        return out[0] if len(out) == 1 else torch.cat(out)

    def _capture(self) -> None:
        """Warm up and capture every (kind, batch bucket, context bucket) graph; largest
        batch first, so smaller graphs reuse its pool memory."""
        pool = torch.cuda.graph_pool_handle() if self.use_graph else None
        stream = torch.cuda.Stream(device=self.model.device)
        # the most tokens first, as below
        for n, bucket in sorted(self.prefill_shapes, key=lambda s: -s[0] * s[1]):
            self._prompt_len.fill_(bucket)
            for _ in range(WARMUP_STEPS):
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    self._prefill_body(n, bucket)
                torch.cuda.current_stream().wait_stream(stream)
            if self.use_graph:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    self._prefill_logits[n, bucket] = self._prefill_body(n, bucket)
                self._prefill_graphs[n, bucket] = graph
        for b in reversed(self.batch_sizes):
            for bound in self.bounds:
                for kind in (GREEDY, LOGITS):
                    for _ in range(WARMUP_STEPS):
                        self._park(b, bound)
                        stream.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(stream):
                            self._body(kind, b, bound)
                        torch.cuda.current_stream().wait_stream(stream)
                    if not self.use_graph:
                        continue
                    self._park(b, bound)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=pool):
                        logits = self._body(kind, b, bound)
                    if logits is not None:
                        self._logits[b, bound] = logits
                    self._graphs[kind, b, bound] = graph
        self.tokens.zero_()
        self.positions.zero_()
        self.seq_lens.fill_(1)
        self.active.zero_()
        torch.cuda.synchronize(self.model.device)

    def _park(self, b: int, bound: int) -> None:
        # Every row at the bucket's last position, active: the most work the graph ever does.
        self.tokens[:b].zero_()
        self.positions[:b].fill_(bound - 1)
        self.seq_lens[:b].fill_(bound)
        self.active[:b].fill_(1)
