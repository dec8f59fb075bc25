"""Does batching change a sequence's results? Greedy tokens and teacher-forced KL, alone vs batched.

    python -m evokernel.engine.batch_check --model DIR [--batch 8] [--steps 64]
        [--prompt-len 32] [--device cuda|cpu] [--ops torch|triton] [--rows-per-call N]

Each of `batch` prompts (random ids, lengths around `prompt-len`) runs twice through the
serving path (engine/batching.py): alone (a runner with one slot) and together (one runner,
all slots busy), greedy, `steps` tokens. Prefill is always at batch 1, so the first token is
the same; after that, only the decode step's arithmetic differs between batch sizes (the
kernels may reduce in another order for other row counts). The report:

  * `greedy_equal`: how many prompts produced exactly the same tokens;
  * teacher-forced KL: the batched decode fed each prompt's *alone* tokens, so both runs see
    the same context at every step; KL(alone || batched) of the next-token distributions per
    step (mean and max over prompts and steps), the argmax agreement, and where the argmaxes
    differ, how far apart the two tokens were alone (`flip_gap_max`: the largest
    log-probability gap, alone, between the alone argmax and the batched one). A reduction-order
    difference shows as a small KL (the tiny model in float32 on the CPU: max ~2e-7, from the
    matrix products reducing in another order at batch 4 than at batch 1)
    with argmax flips only where the top two logits nearly tie; a defect (a wrong row, a
    stale position) shows as KL of order 1;
  * `noise_kl_mean`: for a model below float32 (bf16 on a GPU), the same teacher-forced
    decode alone in float32 against the model's own (KL(float32 || model), mean): the size of
    the model dtype's rounding, which any other summation order may move by as much.

The verdict (`reduction_order_only`): the batched KL mean below KL_TOLERANCE, or below twice
the dtype's own noise where that was measured (verify's criterion for our engine against
transformers' bf16: as close as the dtype allows). A bf16 model's batched KL is of the same
size as its distance from float32 (2e-3 on random Qwen3-0.6B), a defect's is of order 1.

Ends stdout with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import asdict, dataclass

import torch

from evokernel.engine.batching import BatchRunner, RowParams, cache_rows, row_limit
from evokernel.engine.decoder import DecoderModel

KL_TOLERANCE = 1e-3  # mean KL (nats) below which a difference is reduction order
NOISE_FACTOR = 2.0  # ... or below this many times the model dtype's own KL from float32


@dataclass
class BatchCheck:
    batch: int
    steps: int
    greedy_equal: int
    kl_mean: float
    kl_max: float
    argmax_agree: float
    first_divergence: list[int | None]  # per prompt: the step where free-running tokens differ
    noise_kl_mean: float | None = None  # KL(float32 || the model alone), mean; None in float32
    flip_gap_max: float = 0.0  # nats, alone, between the two argmaxes where they differ

    @property
    def reduction_order_only(self) -> bool:
        noise = NOISE_FACTOR * (self.noise_kl_mean or 0.0)
        return self.kl_mean < max(KL_TOLERANCE, noise)


def greedy_tokens(
    model: DecoderModel,
    prompts: list[list[int]],
    steps: int,
    max_len: int,
    rows_per_call: int | None,
) -> list[list[int]]:
    """Greedy tokens of every prompt run together through one BatchRunner."""
    runner = BatchRunner(model, len(prompts), max_len, rows_per_call=rows_per_call)
    out: dict[int, list[int]] = {}
    for prompt in prompts:
        slot, first = runner.admit(prompt, RowParams())
        out[slot] = first.wait().tokens
    for _ in range(steps - 1):
        pending = runner.step()
        assert pending is not None
        for slot, token in zip(pending.slots, pending.wait().tokens):
            out[slot].append(token)
    return [out[s] for s in sorted(out)]


def teacher_forced_logprobs(
    model: DecoderModel, prompts: list[list[int]], forced: list[list[int]], max_len: int
) -> torch.Tensor:
    """[B, steps, V] log-probabilities of every prompt decoded together, fed `forced`
    tokens (each prompt prefilled alone, as the server does)."""
    B, dev = len(prompts), model.device
    cache = model.new_cache(B, max_len)
    out = []
    for b, prompt in enumerate(prompts):
        ids = torch.tensor([prompt], device=dev)
        lengths = torch.tensor([len(prompt)], device=dev)
        out.append(model.prefill(ids, lengths, cache_rows(cache, b, b + 1)))
    steps = [torch.cat(out).log_softmax(-1)]
    positions = torch.tensor([len(p) for p in prompts], dtype=torch.int32, device=dev)
    limit = row_limit(model) or B  # rows one fused decode launch takes
    for k in range(len(forced[0]) - 1):
        tokens = torch.tensor([f[k] for f in forced], device=dev)
        seq_lens = positions + 1
        logits = torch.cat(
            [
                model.decode(tokens[s:e], positions[s:e], seq_lens[s:e], cache_rows(cache, s, e))
                for s, e in ((s, min(B, s + limit)) for s in range(0, B, limit))
            ]
        )
        steps.append(logits.log_softmax(-1))
        positions = seq_lens
    return torch.stack(steps, dim=1)


def check(
    model: DecoderModel,
    prompts: list[list[int]],
    steps: int,
    rows_per_call: int | None = None,
    reference: DecoderModel | None = None,
) -> BatchCheck:
    """`reference`: the same checkpoint in float32, for the noise yardstick (optional)."""
    max_len = max(len(p) for p in prompts) + steps + 1
    with torch.inference_mode():
        alone = [greedy_tokens(model, [p], steps, max_len, rows_per_call)[0] for p in prompts]
        together = greedy_tokens(model, prompts, steps, max_len, rows_per_call)
        solo = torch.cat(
            [teacher_forced_logprobs(model, [p], [a], max_len) for p, a in zip(prompts, alone)]
        )  # [B, steps, V]
        batched = teacher_forced_logprobs(model, prompts, alone, max_len)
        noise = None
        if reference is not None:
            exact = torch.cat(
                [
                    teacher_forced_logprobs(reference, [p], [a], max_len)
                    for p, a in zip(prompts, alone)
                ]
            ).to(solo.device)
            noise = _kl(exact, solo.float()).mean().item()
    kl = _kl(solo.float(), batched.float())  # [B, steps]
    top_solo, top_batched = solo.argmax(-1), batched.argmax(-1)
    agree = (top_solo == top_batched).float().mean().item()
    gaps = solo.float().gather(-1, top_solo[..., None]) - solo.float().gather(
        -1, top_batched[..., None]
    )
    divergence = [
        next((i for i, (x, y) in enumerate(zip(a, t)) if x != y), None)
        for a, t in zip(alone, together)
    ]
    return BatchCheck(
        batch=len(prompts),
        steps=steps,
        greedy_equal=sum(a == t for a, t in zip(alone, together)),
        kl_mean=kl.mean().item(),
        kl_max=kl.max().item(),
        argmax_agree=agree,
        first_divergence=divergence,
        noise_kl_mean=noise,
        flip_gap_max=gaps.max().item(),
    )


def _kl(p_log: torch.Tensor, q_log: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over the last axis from log-probabilities, clamped at 0 (rounding)."""
    return (p_log.exp() * (p_log - q_log)).sum(-1).clamp_min(0)


def main(argv: list[str] | None = None) -> int:
    from evokernel import device as devices
    from evokernel.engine.loading import load_engine

    p = argparse.ArgumentParser(prog="python -m evokernel.engine.batch_check", description=__doc__)
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--device", choices=("cuda", "cpu"), default=None)
    p.add_argument("--ops", choices=("torch", "triton"), default=None)
    p.add_argument("--rows-per-call", type=int, default=None)
    args = p.parse_args(argv)
    device = devices.resolve(args.device)
    ops = args.ops or ("triton" if device == "cuda" else "torch")
    rng = random.Random(0)
    model = load_engine(args.model, device, None, ops)
    reference = None
    if model.dtype != torch.float32:  # the dtype's own noise, the verdict's yardstick
        reference = load_engine(args.model, device, torch.float32, "torch")
    top = min(model.cfg.vocab_size, 32000)
    prompts = [
        [rng.randrange(1, top) for _ in range(max(1, args.prompt_len + rng.randrange(-8, 9)))]
        for _ in range(args.batch)
    ]
    result = check(model, prompts, args.steps, args.rows_per_call, reference)
    print(
        f"batch {result.batch}, {result.steps} steps, {device} {model.dtype}, ops {ops}: "
        f"greedy equal {result.greedy_equal}/{result.batch}; teacher-forced KL mean "
        f"{result.kl_mean:.3g}, max {result.kl_max:.3g}; argmax agreement "
        f"{result.argmax_agree:.4f} (largest gap at a flip {result.flip_gap_max:.3g} nats); "
        + (
            ""
            if result.noise_kl_mean is None
            else f"{model.dtype} vs float32 alone: KL mean {result.noise_kl_mean:.3g}; "
        )
        + ("reduction order only" if result.reduction_order_only else "MORE than reduction order")
    )
    print(json.dumps(asdict(result) | {"reduction_order_only": result.reduction_order_only}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
