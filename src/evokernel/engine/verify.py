"""Check the engine against Hugging Face transformers, step by step, in KL divergence.

The reference (transformers' Qwen3, eager attention, the engine's dtype and device) decodes
`steps` tokens greedily from the prompt. The engine is teacher-forced on those tokens: it
prefills the prompt, then runs its decode path (the CUDA graph on CUDA) feeding the
reference's tokens, so both produce logits for the same contexts. Per step, in float64 over
the whole vocabulary: KL(ref || ours) and whether the argmaxes agree.

When the dtype is not float32, transformers also runs in float32 on the same tokens (one
forward pass), giving KL(fp32 || ours) and KL(fp32 || transformers in our dtype).

Pass (every logit finite, and):
  * float32:         kl_mean < threshold (1e-5)
  * bfloat16/float16: kl_mean < threshold (1e-3), or the engine is no further from the float32
    model than transformers in the same dtype is: fp32_kl_mean <= PRECISION_FACTOR *
    fp32_kl_mean_ref. The second test exists because a deep model in bfloat16 amplifies
    rounding differences: two correct bf16 implementations that round at different points (an
    attention softmax kept in float32, a different GEMM split) differ by more than 1e-3 on
    Qwen3-0.6B shapes, while each stays as close to the float32 model as the other.
`criterion` says which test passed.
"""

from __future__ import annotations

import gc
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from evokernel.engine.decoder import DecoderModel
from evokernel.engine.graph import DecodeRunner
from evokernel.engine.loading import load_engine
from evokernel.engine.quant_verify import (
    check_original,
    quantization_label,
    reference_dir,
)
from evokernel.errors import ConfigError, EvokernelError
from evokernel.model.config import ModelConfig

THRESHOLDS: dict[torch.dtype, float] = {
    torch.float32: 1e-5,
    torch.bfloat16: 1e-3,
    torch.float16: 1e-3,
}
PRECISION_FACTOR = 2.0  # seen 0.66-1.36 for correct bf16 engines on CPU, >25 for broken ones


@dataclass
class VerifyResult:
    kl_mean: float
    kl_max: float
    argmax_agreement: float
    steps: int
    device: str
    dtype: str
    threshold: float
    passed: bool
    reason: str  # empty when passed
    criterion: str  # the test that passed: "kl_mean" | "fp32_precision"; empty when failed
    prompt_len: int
    cuda_graph: bool
    ops: dict[str, str] = field(default_factory=dict)
    kl_per_step: list[float] = field(default_factory=list)
    fp32_kl_mean: float | None = None  # KL(transformers fp32 || ours)
    fp32_kl_mean_ref: float | None = None  # KL(transformers fp32 || transformers in dtype)
    # Quantized checkpoints (engine/quant_verify.py): the format, and with --reference the
    # quantization's own error against the dense original (informational, never judged)
    quantization: str | None = None
    original_kl_mean: float | None = None  # KL(original || ours)
    original_argmax_agreement: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_prompt(vocab_size: int, length: int = 16) -> list[int]:
    """A fixed, spread-out prompt of valid ids (the same for every run)."""
    return [(7 + 7919 * i) % vocab_size for i in range(length)]


def kl_and_agreement(ref: torch.Tensor, ours: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ref, ours [N, V] logits -> (KL(ref || ours) [N] float64, argmax equal [N] bool)."""
    ref64, ours64 = ref.double(), ours.double()
    log_p = torch.log_softmax(ref64, dim=-1)
    log_q = torch.log_softmax(ours64, dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(dim=-1)
    return kl, ref64.argmax(dim=-1) == ours64.argmax(dim=-1)


def load_reference(model_dir: str | Path, device: str, dtype: torch.dtype) -> Any:
    try:
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
    except ImportError:
        raise EvokernelError("verify needs transformers (pip install 'evokernel[ref]')") from None
    hf_logging.disable_progress_bar()
    try:
        model: Any = AutoModelForCausalLM.from_pretrained(
            str(model_dir),
            config=_reference_config(model_dir),
            dtype=dtype,
            attn_implementation="eager",
        )
    except Exception as err:  # it raises many kinds for checkpoints it refuses
        # e.g. AssertionError for a pad_token_id outside the vocabulary, which our engine
        # ignores; its validation errors span lines: keep them on one.
        text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
        raise EvokernelError(
            f"transformers cannot load {model_dir}: {type(err).__name__}: {text[:300]}"
        ) from None
    return model.to(device).eval()


def _reference_config(model_dir: str | Path) -> Any:
    """transformers' config for `model_dir`, with token ids outside the vocabulary unset, as
    `ModelConfig` drops them (which warns once): a hub config on a small test vocabulary
    otherwise stops transformers at a pad_token_id its embedding cannot hold. None of these
    ids changes a logit."""
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its warnings about these ids repeat ours
    try:
        config = AutoConfig.from_pretrained(str(model_dir))
        vocab = config.vocab_size
        for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
            value = getattr(config, key, None)
            ids = value if isinstance(value, list) else [value]
            kept = [i for i in ids if isinstance(i, int) and 0 <= i < vocab]
            if kept != ids:
                setattr(config, key, kept if isinstance(value, list) else None)
    finally:
        hf_logging.set_verbosity(verbosity)
    return config


def reference_greedy(hf: Any, prompt: list[int], steps: int) -> tuple[list[int], torch.Tensor]:
    """transformers greedy decoding -> (tokens [steps], logits [steps, V] float64 on CPU)."""
    device = next(hf.parameters()).device
    ids = torch.tensor([prompt], device=device)
    tokens: list[int] = []
    logits: list[torch.Tensor] = []
    with torch.inference_mode():
        out = hf(input_ids=ids, use_cache=True)
        for i in range(steps):
            last = out.logits[0, -1]
            logits.append(last.to("cpu", torch.float64))
            tokens.append(int(last.argmax()))
            if i + 1 < steps:
                nxt = torch.tensor([[tokens[-1]]], device=device)
                out = hf(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
    return tokens, torch.stack(logits)


def reference_forced(hf: Any, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """One transformers forward over prompt + tokens[:-1] -> logits [len(tokens), V] float64."""
    device = next(hf.parameters()).device
    ids = torch.tensor([prompt + tokens[:-1]], device=device)
    with torch.inference_mode():
        out = hf(input_ids=ids, use_cache=False)
    return out.logits[0, len(prompt) - 1 :].to("cpu", torch.float64)


def engine_forced(
    model: DecoderModel, prompt: list[int], tokens: list[int], use_graph: bool | None = None
) -> tuple[torch.Tensor, bool]:
    """The engine's logits for the same contexts: prefill the prompt, then decode step by step
    feeding `tokens` -> (logits [len(tokens), V] float64 on CPU, whether a CUDA graph ran)."""
    dev = model.device
    graph = dev.type == "cuda" if use_graph is None else use_graph
    L = len(prompt)
    with torch.inference_mode():
        cache = model.new_cache(1, L + len(tokens))
        runner = DecodeRunner(model, cache, use_graph=graph, greedy=False)
        ids = torch.tensor([prompt], device=dev)
        logits = [
            model.prefill(ids, torch.tensor([L], device=dev), cache)[0].to("cpu", torch.float64)
        ]
        runner.start(torch.tensor(tokens[:1], device=dev), torch.tensor([L], device=dev), L + 1)
        for i in range(1, len(tokens)):
            step = runner.step()
            assert step is not None, "a sampling runner returns logits"
            logits.append(step[0].to("cpu", torch.float64))
            runner.feed(torch.tensor(tokens[i : i + 1], device=dev))
    return torch.stack(logits), runner.uses_graph


def compare(
    model: DecoderModel,
    hf: Any,
    prompt: list[int],
    steps: int,
    threshold: float | None = None,
    hf_fp32: Any = None,
    use_graph: bool | None = None,
    hf_original: Any = None,
) -> VerifyResult:
    """Verify `model` against the loaded transformers model `hf` (same weights); with
    `hf_original` (the dense model a quantized one came from) also report how far ours is
    from it."""
    _check(steps, threshold)
    model.cfg.check_tokens(prompt, steps, "--steps", model.max_seq_len)
    thr = THRESHOLDS[model.dtype] if threshold is None else threshold
    ref_tokens, ref_logits = reference_greedy(hf, prompt, steps)
    ours, graphed = engine_forced(model, prompt, ref_tokens, use_graph)
    kl, agree = kl_and_agreement(ref_logits, ours)
    kl_mean, kl_max = float(kl.mean()), float(kl.max())
    fp32_ours = fp32_ref = None
    if hf_fp32 is not None:
        truth = reference_forced(hf_fp32, prompt, ref_tokens)
        fp32_ours = float(kl_and_agreement(truth, ours)[0].mean())
        fp32_ref = float(kl_and_agreement(truth, ref_logits)[0].mean())
    original: tuple[float | None, float | None] = (None, None)
    if hf_original is not None:
        original = original_figures(hf_original, prompt, ref_tokens, ours)
    dtype = str(model.dtype).removeprefix("torch.")
    criterion, reason = _judge(
        bool(torch.isfinite(ours).all()), kl_mean, thr, model.dtype, fp32_ours, fp32_ref
    )
    return VerifyResult(
        kl_mean=kl_mean,
        kl_max=kl_max,
        argmax_agreement=float(agree.double().mean()),
        steps=steps,
        device=model.device.type,
        dtype=dtype,
        threshold=thr,
        passed=bool(criterion),
        reason=reason if not criterion else "",
        criterion=criterion,
        prompt_len=len(prompt),
        cuda_graph=graphed,
        ops=dict(model.ops.origin),
        kl_per_step=[float(x) for x in kl],
        fp32_kl_mean=fp32_ours,
        fp32_kl_mean_ref=fp32_ref,
        quantization=quantization_label(model.cfg),
        original_kl_mean=original[0],
        original_argmax_agreement=original[1],
    )


def _check(steps: int, threshold: float | None) -> None:
    if steps < 1:
        raise ConfigError(f"--steps must be >= 1, got {steps}")
    if threshold is not None and not (math.isfinite(threshold) and threshold >= 0):
        raise ConfigError(f"--threshold must be finite and >= 0, got {threshold}")


def _judge(
    finite: bool,
    kl_mean: float,
    threshold: float,
    dtype: torch.dtype,
    fp32_ours: float | None,
    fp32_ref: float | None,
) -> tuple[str, str]:
    """(criterion that passed or "", one-line reason for a failure)."""
    name = str(dtype).removeprefix("torch.")
    if not finite:
        return "", "the engine produced non-finite logits"
    if kl_mean < threshold:
        return "kl_mean", ""
    reason = f"KL mean {kl_mean:.3g} >= threshold {threshold:g} ({name})"
    if dtype == torch.float32 or fp32_ours is None or fp32_ref is None:
        return "", reason
    if fp32_ours <= PRECISION_FACTOR * fp32_ref:
        return "fp32_precision", ""
    return "", (
        f"{reason}, and KL vs float32 {fp32_ours:.3g} > {PRECISION_FACTOR:g} x "
        f"transformers' own {fp32_ref:.3g}"
    )


def verify(
    model_dir: str | Path,
    device: str | None = None,
    dtype: torch.dtype | str | None = None,
    ops: str = "torch",
    steps: int = 32,
    prompt: list[int] | None = None,
    threshold: float | None = None,
    fp32_reference: bool | None = None,
    pdl: bool | None = None,
    kernels: str | Path | None = None,
    reference: str | Path | None = None,
) -> VerifyResult:
    """Load the engine (with the kernel pack `kernels`, when given) and transformers from
    `model_dir` and compare them (see module doc). A quantized checkpoint is compared with
    transformers on its weights dequantized independently; `reference` is the dense model
    it was quantized from (engine/quant_verify.py).

    The prompt and `steps` are checked against the config before anything is loaded: the
    reference would decode past the model's positions, and the engine then refuse them."""
    _check(steps, threshold)
    cfg = ModelConfig.from_dir(model_dir)
    ids = default_prompt(cfg.vocab_size) if prompt is None else prompt
    cfg.check_tokens(ids, steps, "--steps")
    if reference is not None:
        check_original(cfg, reference)
    model = load_engine(
        model_dir, device, dtype, ops, max_seq_len=len(ids) + steps, pdl=pdl, kernels=kernels
    )
    dev = model.device.type
    want_fp32 = model.dtype != torch.float32 if fp32_reference is None else fp32_reference
    with reference_dir(model_dir) as ref_dir:
        hf = load_reference(ref_dir, dev, model.dtype)
        hf_fp32 = load_reference(ref_dir, dev, torch.float32) if want_fp32 else None
    hf_original = load_reference(reference, dev, model.dtype) if reference is not None else None
    try:
        return compare(model, hf, ids, steps, threshold, hf_fp32, hf_original=hf_original)
    finally:
        del hf, hf_fp32, hf_original
        gc.collect()
        if dev == "cuda":
            torch.cuda.empty_cache()


def original_figures(
    hf_original: Any, prompt: list[int], tokens: list[int], ours: torch.Tensor
) -> tuple[float, float]:
    """(KL(original || ours) mean over the steps, argmax agreement) on the same contexts: a
    quantized checkpoint's own error against the dense model it came from (informational)."""
    truth = reference_forced(hf_original, prompt, tokens)
    kl, agree = kl_and_agreement(truth, ours)
    return float(kl.mean()), float(agree.double().mean())
