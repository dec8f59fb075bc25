"""Generate tokens: prefill the prompts, then decode step by step until EOS or max tokens.

    result = generate(model, [[1, 2, 3]], GenerateOptions(max_new_tokens=200))

Prompts may differ in length (batch B >= 1; they are right-padded for prefill and each then
decodes at its own position). The first new token comes from the prefill logits; each decode
step adds one more per sequence. A sequence stops after emitting an EOS id (kept in its
tokens) and the loop stops when all have, or after `max_new_tokens`.

Timing: on CUDA everything that compiles or captures (Triton JIT, the CUDA graphs, cuBLAS
heuristics, one untimed prefill of the same shape) happens first and is reported as
`warmup_ms`; the model keeps its decode runner (cache and graphs, engine/graph.py
`runner_for`), so a later call that fits it pays only the prefill warm-up. `prefill_ms` covers
prefill plus choosing the first token; `decode_ms` covers the decode loop, measured with CUDA
events and cross-checked with a synchronized host clock (`decode_wall_ms`). On CUDA the loop
reads tokens back for the EOS check only every `eos_check_every` steps (each read is a host
sync), so it may run up to that many steps past the last EOS; those steps are timed and counted
in `decode_steps`, their tokens discarded. `decode_tok_s` = B * decode_steps / decode time. On
CPU, figures are interpreter/eager timings, not speed.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from evokernel.engine.decoder import DecoderModel
from evokernel.engine.graph import runner_for
from evokernel.errors import ConfigError
from evokernel.ops.sampling import GREEDY, SamplingParams

if TYPE_CHECKING:
    from tokenizers import Tokenizer


@dataclass(frozen=True)
class GenerateOptions:
    max_new_tokens: int
    sampling: SamplingParams = GREEDY
    seed: int = 0
    eos_token_ids: tuple[int, ...] = ()
    use_graph: bool | None = None  # None: on CUDA
    eos_check_every: int | None = None  # None: 16 on CUDA, 1 on CPU

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ConfigError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if not 0 <= self.seed < 2**63:  # what every torch generator takes, without aliasing
            raise ConfigError(f"--seed must be in [0, 2**63), got {self.seed}")


@dataclass
class GenerateResult:
    tokens: list[list[int]]  # new tokens per sequence (not the prompt), EOS included
    stop_reasons: list[str]  # per sequence: "eos" | "length"
    prompt_lens: list[int]
    prefill_ms: float
    decode_ms: float
    decode_wall_ms: float
    decode_steps: int
    decode_tok_s: float
    warmup_ms: float
    device: str
    dtype: str
    cuda_graph: bool
    ops: dict[str, str] = field(default_factory=dict)
    text: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Clock:
    """Milliseconds of a region: CUDA events on CUDA (plus a synchronized host clock)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device

    def start(self) -> None:
        self._sync()
        self._t0 = time.perf_counter()
        if self.cuda:
            self._e0 = torch.cuda.Event(enable_timing=True)
            self._e0.record()

    def stop(self) -> tuple[float, float]:
        """(device ms, host ms); the same host figure on CPU."""
        if self.cuda:
            e1 = torch.cuda.Event(enable_timing=True)
            e1.record()
        self._sync()
        host = (time.perf_counter() - self._t0) * 1e3
        return (self._e0.elapsed_time(e1) if self.cuda else host), host

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)


def generate(
    model: DecoderModel,
    prompts: list[list[int]],
    options: GenerateOptions,
    tokenizer: Tokenizer | None = None,
) -> GenerateResult:
    """Generate for each prompt (token ids); `tokenizer` fills `text` with the new tokens."""
    dev = model.device
    if not prompts:
        raise ConfigError("every prompt needs at least one token")
    for p in prompts:
        model.cfg.check_tokens(p, options.max_new_tokens, "--max-new-tokens", model.max_seq_len)
    B, lens = len(prompts), [len(p) for p in prompts]
    T = max(lens)
    need = T + options.max_new_tokens
    cuda = dev.type == "cuda"
    use_graph = cuda if options.use_graph is None else options.use_graph
    check_every = options.eos_check_every or (16 if cuda else 1)
    eos = torch.tensor(options.eos_token_ids or [-1], device=dev)
    generator = torch.Generator(device=dev).manual_seed(options.seed)
    params = options.sampling
    ids = torch.zeros((B, T), dtype=torch.int64)
    for b, p in enumerate(prompts):
        ids[b, : len(p)] = torch.tensor(p)
    ids = ids.to(dev)
    lengths = torch.tensor(lens, device=dev)
    clock = _Clock(dev)

    with torch.inference_mode():
        clock.start()
        runner = runner_for(model, B, need, use_graph=use_graph, greedy=params.greedy)
        cache = runner.cache
        if cuda:
            model.prefill(ids, lengths, cache)  # untimed: compiles the prefill path
        warmup_ms, _ = clock.stop()

        clock.start()
        first = model.ops.sample(model.prefill(ids, lengths, cache), params, generator)  # [B]
        prefill_ms, _ = clock.stop()

        out = [first]
        done = torch.isin(first, eos).cpu()
        runner.start(first, lengths.to(torch.int32), longest=T)
        steps = 0
        clock.start()
        while steps < options.max_new_tokens - 1 and not bool(done.all()):
            logits = runner.step()
            steps += 1
            if logits is None:  # greedy: the step wrote the next tokens
                nxt = runner.tokens.clone()
            else:
                nxt = model.ops.sample(logits, params, generator)
                runner.feed(nxt)
            out.append(nxt)
            if options.eos_token_ids and steps % check_every == 0:
                recent = torch.stack(out[-check_every:], dim=1)  # [B, k]
                done |= torch.isin(recent, eos).any(dim=1).cpu()
        decode_ms, decode_wall_ms = clock.stop()

    tokens, reasons = _truncate(torch.stack(out, dim=1).cpu(), options.eos_token_ids)
    return GenerateResult(
        tokens=tokens,
        stop_reasons=reasons,
        prompt_lens=lens,
        prefill_ms=prefill_ms,
        decode_ms=decode_ms if steps else 0.0,
        decode_wall_ms=decode_wall_ms if steps else 0.0,
        decode_steps=steps,
        decode_tok_s=(B * steps / (decode_ms / 1e3)) if steps and decode_ms > 0 else 0.0,
        warmup_ms=warmup_ms,
        device=dev.type,
        dtype=str(model.dtype).removeprefix("torch."),
        cuda_graph=runner.uses_graph,
        ops=dict(model.ops.origin),
        text=[tokenizer.decode(t) for t in tokens] if tokenizer is not None else None,
    )


def _truncate(
    all_tokens: torch.Tensor, eos_ids: tuple[int, ...]
) -> tuple[list[list[int]], list[str]]:
    """[B, n] -> per sequence the tokens up to and including its first EOS, and why it stopped."""
    tokens, reasons = [], []
    for row in all_tokens.tolist():
        stop = next((i for i, t in enumerate(row) if t in eos_ids), None)
        tokens.append(row if stop is None else row[: stop + 1])
        reasons.append("length" if stop is None else "eos")
    return tokens, reasons
