"""Random-weight checkpoints in Hugging Face layout, with logits that are not flat.

    write_random_checkpoint(out_dir, preset="tiny", seed=0)            # -> out_dir
    write_random_checkpoint(out_dir, "qwen3-0.6b", layers=4, shards=2, untied=True)

Writes config.json, generation_config.json, model.safetensors (or shards + index), and a
byte-level tokenizer (`tokenizer.py`), so transformers and our loader both read the result.
Each tensor is drawn straight in the on-disk dtype, in blocks of 4M values each seeded by
(`seed`, tensor name, block), on all cores, and streamed to disk while the next is drawn: RAM
holds two tensors at most, and the values depend on neither the shard layout nor the number
of threads.

Init scales. HF's default init (N(0, 0.02) everywhere) gives Qwen3-0.6B logits with std ~0.6:
next-token entropy within 0.2 nats of log V, top-1 margins ~0.1, argmax set by rounding noise,
so neither argmax agreement nor KL between two implementations would mean anything. The logits
must be peaked, and the model must also survive bfloat16: a perturbation of the residual stream
(each of its 2L bf16 additions rounds it, relative error ~0.0017) must not grow through the
layers, or rounding alone moves the logits as much as a kernel bug would. With H hidden, I
intermediate, L layers, V vocab (RMS means per element):

  * embed_tokens, lm_head, q/k/v/gate/up: N(0, 1/H). Rows of unit norm; the projections keep
    RMS (input normalised to RMS 1 -> output RMS 1).
  * o_proj and down_proj: scaled so that the 2L blocks together add BLOCKS_TO_EMBED = 2 times
    the embedding's RMS, each an equal share r = 2 (2 L H)^-1/2 (o_proj assumes attention
    outputs of RMS 0.57, measured; down_proj that silu(gate) * up has RMS 0.596 for unit-normal
    inputs). The embedding keeps a real share of the stream and each block is a small update.
  * q_norm, k_norm ~1: attention scores have std ~1 (per-head RMS-normalised q and k). Soft
    enough that rounding in q and k barely moves the attention weights (q/k norm weights of
    1.6, scores of std 2.6, made bf16 ~5x worse), sharp enough that positions matter:
    shuffling them or dropping the causal mask changes most argmaxes.
  * final norm weight ~ N(0, s^2), s = sqrt(ln V) (3.45 for Qwen3's vocab, 2.5 for `tiny`):
    logits have std ~s, next-token entropy ~half of log V (Gaussian logits of std s over V
    tokens keep about ln V - s^2/2 nats). Not larger: the bf16 noise in the logits grows with
    s. Zero mean, not s: the embeddings are tied and the stream holds the input token's
    embedding, so a positive mean m would add ~m sqrt(H) / |stream| to that token's own logit
    and the model would predict its input.
  * the other norms ~1; every norm weight except the final one has 10% per-channel noise, so
    skipping one is visible.
  * q/k/v biases (qwen2) ~ N(0, 0.1^2): visible next to the unit-RMS projections, small enough
    to leave the attention scores' scale as above.

What remains in bfloat16 is the rounding itself, which no init removes: the final hidden state
ends ~1.5% off the float32 one (mostly the 2L roundings of the stream), and with Gaussian
logits of std s that costs KL(fp32 || bf16) ~ 0.5 (0.015 s)^2: 1.6-2.0e-3 measured for
Qwen3-0.6B (docs/model.md has the figures; tests/model/conditioning.py measures them).
Values stay within a few units through any depth, finite in bf16 and fp16.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from evokernel.errors import CheckpointError, ConfigError
from evokernel.model.checkpoint import INDEX_FILE, SINGLE_FILE
from evokernel.model.config import CONFIG_LAYOUTS, GENERATION_CONFIG, ModelConfig
from evokernel.model.loader import resolve_dtype
from evokernel.model.presets import MIN_VOCAB, PRESETS, special_token_ids
from evokernel.model.safetensors_io import TensorSpec, read_header, write_file
from evokernel.model.tokenizer import write_byte_tokenizer
from evokernel.model.weights import hf_shapes

ALIASES = {
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "hidden": "hidden_size",
    "intermediate": "intermediate_size",
    "vocab": "vocab_size",
}
BLOCKS_TO_EMBED = 2.0  # RMS the 2L blocks add together, in units of the embedding's RMS
ATTN_OUT_RMS = 0.57  # attention output RMS with unit-RMS values and scores of std ~1 (measured)
SILU_GLU_RMS = 0.596  # sqrt(E[silu(z)^2]) for z ~ N(0, 1), times the RMS-1 up projection
NORM_NOISE = 0.1
BIAS_STD = 0.1
GENERATOR = "evokernel model random"  # safetensors metadata: marks files safe to overwrite
BLOCK = 1 << 22  # elements drawn from one generator (blocks are drawn in parallel)
METADATA = {"format": "pt", "generator": GENERATOR}
# 11 header entries of ~130 bytes per layer: 10,000 layers keep a one-file header at ~15 MB,
# far below safetensors' 100 MB limit (real models have at most a few hundred layers).
MAX_LAYERS = 10_000


@dataclass(frozen=True)
class WriteOptions:
    shards: int = 1
    layout: str = "transformers5"  # or "legacy": config.json layout (see ModelConfig.to_hf_dict)
    tokenizer: bool = True
    generation_eos: tuple[int, ...] = ()


def write_random_checkpoint(
    out_dir: str | Path,
    preset: str = "qwen3-0.6b",
    seed: int = 0,
    dtype: str = "bfloat16",
    **overrides: Any,
) -> Path:
    """Write a random checkpoint of `preset`'s shapes (with `overrides`) to `out_dir`.

    overrides: any `ModelConfig` field, or `layers`, `heads`, `kv_heads`, `hidden`,
    `intermediate`, `vocab`; `untied=True`; `shards=N`; `layout="transformers5" | "legacy"`;
    `tokenizer=False` to skip the tokenizer files.
    """
    cfg, opts = resolve_options(preset, dtype, overrides)
    weight_dtype = resolve_dtype(cfg.dtype)
    specs = [TensorSpec(n, weight_dtype, s) for n, s in hf_shapes(cfg).items()]
    _check_memory(specs)
    out = _prepare(Path(out_dir))
    try:
        _check_disk(out, specs)
        with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:

            def produce(spec: TensorSpec) -> torch.Tensor:
                return _random_tensor(spec, *init_stats(spec.name, cfg), seed, pool)

            _write_weights(out, specs, _split(specs, opts.shards), produce)
        _write_json(out / "config.json", cfg.to_hf_dict(opts.layout))
        generation = {"bos_token_id": cfg.bos_token_id, "eos_token_id": list(opts.generation_eos)}
        _write_json(out / GENERATION_CONFIG, generation)
        if opts.tokenizer:
            write_byte_tokenizer(out, cfg.vocab_size, cfg.max_position_embeddings)
    except OSError as err:  # a full disk, a read-only file system, an I/O error
        raise ConfigError(f"{out}: cannot write the checkpoint ({err.strerror or err})") from None
    return out


def _check_memory(specs: list[TensorSpec]) -> None:
    """Refuse shapes whose largest tensor does not fit twice in the RAM available (the writer
    holds the tensor being written and the next one)."""
    largest = max(specs, key=lambda s: s.nbytes)
    available = _available_ram()
    if available is not None and 2 * largest.nbytes > available:
        raise ConfigError(
            f"tensor {largest.name!r} {list(largest.shape)} takes {largest.nbytes / 1e9:.3g} GB; "
            f"writing needs two such tensors in RAM, {available / 1e9:.3g} GB are available"
        )


def _check_disk(out: Path, specs: list[TensorSpec]) -> None:
    need = sum(s.nbytes for s in specs)
    free = shutil.disk_usage(out).free
    if need > free:
        raise ConfigError(
            f"{out}: the checkpoint takes {need / 1e9:.3g} GB; "
            f"the disk has {free / 1e9:.3g} GB free"
        )


def _available_ram() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _write_weights(
    out: Path,
    specs: list[TensorSpec],
    groups: list[list[TensorSpec]],
    produce: Callable[[TensorSpec], torch.Tensor],
) -> None:
    if len(groups) == 1:
        write_file(out / SINGLE_FILE, specs, produce, METADATA)
    else:
        weight_map: dict[str, str] = {}
        for k, group in enumerate(groups):
            name = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
            write_file(out / name, group, produce, METADATA)
            weight_map |= {s.name: name for s in group}
        index = {"metadata": {"total_size": sum(s.nbytes for s in specs)}, "weight_map": weight_map}
        (out / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")


def _random_tensor(
    spec: TensorSpec, mean: float, std: float, seed: int, pool: ThreadPoolExecutor
) -> torch.Tensor:
    """N(mean, std) in the spec's dtype, drawn in blocks seeded by (seed, name, block): the
    values do not depend on how many threads draw them."""
    t = torch.empty(spec.shape, dtype=spec.dtype)
    flat = t.view(-1)

    def block(k: int) -> None:
        gen = torch.Generator().manual_seed(_tensor_seed(seed, f"{spec.name}#{k}"))
        flat[k * BLOCK : (k + 1) * BLOCK].normal_(mean, std, generator=gen)

    list(pool.map(block, range(-(-flat.numel() // BLOCK))))
    return t


def resolve_options(
    preset: str, dtype: str, overrides: dict[str, Any]
) -> tuple[ModelConfig, WriteOptions]:
    """The config and write options `write_random_checkpoint` would use (nothing is written)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r} (choose from {', '.join(PRESETS)})")
    fields = dict(PRESETS[preset])
    rest = dict(overrides)
    shards = rest.pop("shards", 1)
    layout = rest.pop("layout", "transformers5")
    tokenizer = bool(rest.pop("tokenizer", True))
    if rest.pop("untied", False):
        fields["tie_word_embeddings"] = False
    for key, value in rest.items():
        key = ALIASES.get(key, key)
        if key not in ModelConfig.__dataclass_fields__:
            raise ConfigError(f"unknown override {key!r} for a random checkpoint")
        fields[key] = value
    if not isinstance(shards, int) or shards < 1:
        raise ConfigError(f"shards must be a positive integer, got {shards!r}")
    layers = fields["num_hidden_layers"]
    if isinstance(layers, int) and layers > MAX_LAYERS:
        raise ConfigError(f"layers must be at most {MAX_LAYERS}, got {layers}")
    if layout not in CONFIG_LAYOUTS:
        raise ConfigError(f"unknown config layout {layout!r} (use {', '.join(CONFIG_LAYOUTS)})")
    fields["dtype"] = str(resolve_dtype(dtype)).removeprefix("torch.")
    vocab = fields["vocab_size"]
    if not isinstance(vocab, int) or vocab < MIN_VOCAB:
        raise ConfigError(
            f"vocab_size must be at least {MIN_VOCAB} (256 bytes + 3 special tokens), got {vocab!r}"
        )
    eot, _, im_end = special_token_ids(vocab)
    fields.setdefault("bos_token_id", eot)
    fields.setdefault("eos_token_ids", (im_end,))
    try:
        cfg = ModelConfig(**fields)
    except CheckpointError as err:
        raise ConfigError(f"preset {preset!r}: {str(err).removeprefix('config: ')}") from None
    gen_eos = (*cfg.eos_token_ids, *((eot,) if eot not in cfg.eos_token_ids else ()))
    return cfg, WriteOptions(shards, layout, tokenizer, gen_eos)


def init_stats(name: str, cfg: ModelConfig) -> tuple[float, float]:
    """(mean, std) of the normal distribution tensor `name` is drawn from (module docstring)."""
    H, inter, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    block_rms = BLOCKS_TO_EMBED * (2 * L * H) ** -0.5
    if name == "model.norm.weight":
        return 0.0, math.sqrt(math.log(cfg.vocab_size))
    if name.endswith("norm.weight"):
        return 1.0, NORM_NOISE
    if name.endswith("o_proj.weight"):
        return 0.0, block_rms / (ATTN_OUT_RMS * math.sqrt(cfg.q_size))
    if name.endswith("down_proj.weight"):
        return 0.0, block_rms / (SILU_GLU_RMS * math.sqrt(inter))
    if name.endswith("proj.bias"):  # q/k/v biases (qwen2): small next to unit-RMS outputs
        return 0.0, BIAS_STD
    return 0.0, H**-0.5


def _tensor_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def _split(specs: list[TensorSpec], shards: int) -> list[list[TensorSpec]]:
    """Cut `specs` (in order) into at most `shards` non-empty groups of similar byte size."""
    shards = min(shards, len(specs))
    total = sum(s.nbytes for s in specs)
    groups: list[list[TensorSpec]] = [[]]
    done = 0
    for i, s in enumerate(specs):
        left_specs = len(specs) - i
        left_groups = shards - len(groups)
        full = done >= total * len(groups) / shards
        if groups[-1] and (left_specs <= left_groups or (full and left_groups > 0)):
            groups.append([])
        groups[-1].append(s)
        done += s.nbytes
    return groups


def _prepare(out: Path) -> Path:
    """Create `out`, or clear the weights of a random checkpoint written there before.

    Anything else in a non-empty directory (a real checkpoint above all) is left alone.
    """
    if not str(out).strip():
        raise ConfigError("empty output directory path")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # under a regular file, or a file system that refuses (/proc)
        where = next((p for p in out.parents if p.exists()), out.parent)
        raise ConfigError(
            f"{out}: cannot create the directory in {where} ({err.strerror or err})"
        ) from None
    weights = [out / SINGLE_FILE, *sorted(out.glob("model-*-of-*.safetensors"))]
    weights = [w for w in weights if w.is_file()]
    if any(out.iterdir()) and not (weights and all(map(_written_here, weights))):
        raise ConfigError(
            f"{out}: not empty and holds no checkpoint written by `evokernel model random`; "
            "refusing to write there"
        )
    for path in [*weights, out / INDEX_FILE]:
        path.unlink(missing_ok=True)
    return out


def _written_here(path: Path) -> bool:
    try:
        return read_header(path).metadata.get("generator") == GENERATOR
    except CheckpointError:
        return False


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")
