"""How well a random checkpoint survives bfloat16, measured with transformers.

One teacher-forced forward pass over a random sequence, in float32 and in bfloat16 (the same
bf16 weights, eager attention): KL(fp32 || bf16) per position in float64, argmax agreement,
next-token entropy, top-1 probability and margin (float32 model), how often the argmax repeats
the input token, and how many argmaxes change when the positions are shuffled or the causal
mask is dropped (what RoPE, masking and KV-cache mistakes would do). Also KL(bf16 || bf16 fused):
transformers in bfloat16 against itself rounding at other points, as fused kernels do (RMSNorm
rounding once, attention scores, probabilities and P @ V in float32). Once two bf16 runs differ
anywhere their later roundings are independent, so an independent correct bf16 engine lands
about this far from transformers.

    python tests/model/conditioning.py [--preset qwen3-0.6b] [--length 80] [--seed 0]
        [--layers N] [--hidden N] [--intermediate N] [--vocab N] [--dir EXISTING_CHECKPOINT]

prints one JSON object. The model tests call `measure` on a smaller model.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch


def load(model_dir: Path, dtype: torch.dtype) -> Any:
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=dtype, attn_implementation="eager"
    )
    return model.eval()


@contextmanager
def fused_rounding() -> Iterator[None]:
    """Inside the `with`, transformers' Qwen3 rounds as fused kernels do: RMSNorm scales in
    float32 and rounds once; attention computes scores, softmax and P @ V in float32 and rounds
    its output once."""
    from transformers.models.qwen3 import modeling_qwen3 as mq

    def norm(self: Any, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (self.weight.float() * h).to(x.dtype)

    def attention(
        module: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        scaling: float,
        **_: Any,
    ) -> tuple[torch.Tensor, None]:
        k = mq.repeat_kv(key, module.num_key_value_groups).float()
        v = mq.repeat_kv(value, module.num_key_value_groups).float()
        scores = query.float() @ k.transpose(2, 3) * scaling
        if attention_mask is not None:
            scores = scores + attention_mask.float()
        out = scores.softmax(-1) @ v
        return out.to(query.dtype).transpose(1, 2).contiguous(), None

    patches = [(mq.Qwen3RMSNorm, "forward", norm), (mq, "eager_attention_forward", attention)]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def random_ids(vocab: int, length: int, seed: int) -> torch.Tensor:
    """[1, length]: a prompt of byte tokens (what the byte tokenizer gives), then ids from the
    whole vocabulary (what a teacher-forced continuation holds)."""
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 256, (min(16, length),), generator=gen)
    rest = torch.randint(0, vocab, (length - prompt.numel(),), generator=gen)
    return torch.cat([prompt, rest])[None]


def forward(
    model: Any,
    ids: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    causal: bool = True,
) -> torch.Tensor:
    """Logits [T, V] in float32 for a [1, T] sequence; `causal=False` lets every position see
    every other one."""
    kwargs: dict[str, Any] = {}
    if position_ids is not None:
        kwargs["position_ids"] = position_ids
    if not causal:
        t = ids.shape[1]
        kwargs["attention_mask"] = torch.zeros(1, 1, t, t, dtype=model.dtype)
    with torch.no_grad():
        return model(ids, **kwargs).logits[0].float()


def kl_per_position(ref: torch.Tensor, ours: torch.Tensor) -> torch.Tensor:
    """KL(ref || ours) [T] in float64 from [T, V] logits."""
    log_p = ref.double().log_softmax(-1)
    log_q = ours.double().log_softmax(-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def logit_stats(logits: torch.Tensor) -> dict[str, float]:
    """Entropy (nats), top-1 probability and margin (logits), logit std, over [..., V] logits."""
    logp = logits.double().log_softmax(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    top2 = logits.topk(2, dim=-1).values
    margin = (top2[..., 0] - top2[..., 1]).double().flatten()
    return {
        "entropy_mean": entropy.mean().item(),
        "entropy_max": entropy.max().item(),
        "log_vocab": math.log(logits.shape[-1]),
        "p1_mean": logp.max(-1).values.exp().mean().item(),
        "margin_median": margin.median().item(),
        "margin_p10": margin.quantile(0.1).item(),
        "logit_std": logits.float().std(-1).mean().item(),
    }


def measure(model_dir: Path, length: int = 80, seed: int = 0) -> dict[str, float]:
    """The figures in the module docstring for the checkpoint in `model_dir`."""
    full = load(model_dir, torch.float32)
    ids = random_ids(full.config.vocab_size, length, seed)
    ref = forward(full, ids)
    gen = torch.Generator().manual_seed(seed + 1)
    shuffled = forward(full, ids, position_ids=torch.randperm(length, generator=gen)[None])
    unmasked = forward(full, ids, causal=False)
    del full
    half = load(model_dir, torch.bfloat16)
    low = forward(half, ids)
    with fused_rounding():
        fused = forward(half, ids)
    del half

    kl = kl_per_position(ref, low)
    kl_fused = kl_per_position(low, fused)
    top = ref.argmax(-1)
    return {
        "kl_mean": kl.mean().item(),
        "kl_median": kl.median().item(),
        "kl_max": kl.max().item(),
        "argmax_agreement": (top == low.argmax(-1)).double().mean().item(),
        "kl_fused_mean": kl_fused.mean().item(),
        "kl_fused_max": kl_fused.max().item(),
        "fused_argmax_agreement": (low.argmax(-1) == fused.argmax(-1)).double().mean().item(),
        **logit_stats(ref),
        "repeats_input": (top == ids[0]).double().mean().item(),
        "distinct_argmax": top.unique().numel() / length,
        # position 0 attends to itself only: a shuffled position changes nothing there.
        "changed_by_shuffled_positions": (shuffled.argmax(-1) != top)[1:].double().mean().item(),
        # the last position already sees everything.
        "changed_without_causal_mask": (unmasked.argmax(-1) != top)[:-1].double().mean().item(),
    }


def main(argv: list[str] | None = None) -> int:
    from evokernel.model.random import write_random_checkpoint

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="qwen3-0.6b")
    parser.add_argument("--length", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, help="measure this checkpoint instead of writing one")
    for name in ("layers", "hidden", "intermediate", "vocab"):
        parser.add_argument(f"--{name}", type=int)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.dir is not None:
        result = measure(args.dir, args.length, args.seed)
    else:
        overrides = {
            k: v
            for k in ("layers", "hidden", "intermediate", "vocab")
            if (v := getattr(args, k)) is not None
        }
        with tempfile.TemporaryDirectory() as tmp:
            path = write_random_checkpoint(tmp, args.preset, seed=args.seed, **overrides)
            result = measure(path, args.length, args.seed)
    result["seconds"] = time.perf_counter() - start
    print(json.dumps({k: round(v, 6) for k, v in result.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
