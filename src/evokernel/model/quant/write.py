"""A dense checkpoint directory -> a quantized one in a published layout (`evokernel quantize`).

    summary = write_quantized(model_dir, out_dir, QuantizeOptions("int4", head="int8"))

| --format | layout | config written (quantization_config)                                  |
| -------- | ------ | --------------------------------------------------------------------- |
| fp8      | fp8    | quant_method fp8, fmt e4m3, activation_scheme dynamic,                |
|          |        | weight_block_size [128, 128], modules_to_not_convert [lm_head] unless |
|          |        | the head is fp8                                                       |
| int8     | gptq   | quant_method gptq, bits 8, group_size, sym, desc_act false,           |
|          |        | checkpoint_format gptq (v1), lm_head                                  |
| int4     | gptq   | the same with bits 4; a head of the other width is `lm_head: true`    |
|          |        | plus the per-module rule dynamic {"+:lm_head": {"bits": 8}} (or 4)    |
|          |        | (vLLM, GPTQModel); a head of the body's width, `lm_head: true` alone  |
| int4     | awq    | quant_method awq, bits 4, group_size, zero_point true, version gemm   |
| int8/int4| compressed-tensors | quant_method compressed-tensors, format pack-quantized, one   |
|          |        | config group targeting Linear (int, symmetric or not, strategy group  |
|          |        | or channel), a second one targeting lm_head for a head of the other   |
|          |        | width, ignore [lm_head] for a bf16 head (llm-compressor's W4A16/W8A16)|
| fp8      | compressed-tensors | format naive-quantized, FP8 weights in 128x128 blocks (the    |
|          |        | block strategy), no activation quantization                           |
| fp8      | autofp8| quant_method fp8, activation_scheme dynamic, ignored_layers [lm_head] |
|          |        | unless the head is fp8; one `weight_scale` a module (AutoFP8, vLLM)   |

Every value is rounded to nearest (quantize.py); nothing is calibrated, and the config's
`meta` (GPTQ) says so. The head: `bf16` keeps it dense in the checkpoint's own dtype (and
tied if it was); `int8` / `int4` / `fp8` quantize it (with the body's group size), which
unties it (`tie_word_embeddings: false`, the embedding stays dense for the token lookup,
`lm_head` is stored quantized), since a tied table cannot be both. Which combinations a
layout can record is checked first: an fp8 body takes a bf16 or fp8 head, a GPTQ body a
bf16, int8 or int4 head, AWQ a bf16 head.

The rest of the directory is copied (generation_config.json, tokenizer, chat template, ...);
config.json is the source's, with `quantization_config` (and the head's tying) added, so
every key the source had stays. Tensors are streamed: one module's tensors in RAM at a time.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from evokernel import __version__
from evokernel.errors import ConfigError
from evokernel.model.checkpoint import INDEX_FILE, SINGLE_FILE, Checkpoint, inspect_checkpoint
from evokernel.model.config import ModelConfig, read_json_object
from evokernel.model.quant import quantize
from evokernel.model.quant.config import CT, CT_WHOLE, HEAD, ModuleSpec
from evokernel.model.quant.layout import all_modules, quantized_tensors
from evokernel.model.safetensors_io import STORAGE_DTYPES, TensorMap, TensorSpec, write_file

FORMATS = ("fp8", "int8", "int4")
HEADS = ("bf16", "int8", "int4", "fp8")
HEAD_BITS = {"int8": 8, "int4": 4}
# the layouts each format can be written in, its default (no --layout) first
LAYOUTS_OF = {"fp8": ("fp8", CT, "autofp8"), "int8": ("gptq", CT), "int4": ("gptq", "awq", CT)}
LAYOUT_NAMES = {"fp8": "Qwen's FP8 blocks (no --layout)", "gptq": "gptq (no --layout)"}
FP8_BLOCK = (128, 128)
SHARD_BYTES = 4 << 30
METADATA = {"format": "pt", "generator": "evokernel quantize"}
EMBED = "model.embed_tokens.weight"
# Written as stored (the layout's own dtypes): packed scales as the usual publishers do.
PACKED_DTYPES = {
    "weight_scale_inv": "F32",
    "scales": "F16",
    "weight": "F8_E4M3",
    "weight_scale": "F16",  # compressed-tensors int scales (FP8: F32, `_dtype`)
    "weight_shape": "I64",
}


@dataclass(frozen=True)
class QuantizeOptions:
    format: str  # fp8 | int8 | int4
    head: str = "bf16"  # bf16 (dense, the checkpoint's dtype) | int8 | int4 | fp8
    group_size: int | None = None  # int formats: default 128; -1 = per row
    layout: str | None = None  # int4: gptq (default) | awq
    sym: bool = True  # gptq: symmetric zero points (AWQ is always asymmetric)
    shard_bytes: int = SHARD_BYTES

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ConfigError(f"--format {self.format!r}: use one of {', '.join(FORMATS)}")
        if self.head not in HEADS:
            raise ConfigError(f"--head {self.head!r}: use one of {', '.join(HEADS)}")
        layout = self.resolved_layout
        if layout not in LAYOUTS_OF[self.format]:
            ways = [LAYOUT_NAMES.get(w, w) for w in LAYOUTS_OF[self.format]]
            raise ConfigError(
                f"--layout {self.layout}: {self.format} is written as "
                f"{', '.join(ways[:-1])} or {ways[-1]}"
            )
        allowed = {
            "fp8": ("bf16", "fp8"), "autofp8": ("bf16", "fp8"), "gptq": ("bf16", "int8", "int4"),
            "awq": ("bf16",),
            CT: ("bf16", "fp8") if self.format == "fp8" else ("bf16", "int8", "int4"),
        }[layout]  # fmt: skip
        if self.head not in allowed:
            raise ConfigError(
                f"--head {self.head}: the {layout} layout records a head in "
                f"{' or '.join(allowed)} only"
            )
        if self.format == "fp8" and self.group_size is not None:
            raise ConfigError(
                "--group-size applies to int8 and int4 (fp8 uses 128x128 blocks, or one scale "
                "a module with --layout autofp8)"
            )
        gs = self.group_size
        per = 32 // self.bits
        if gs is not None and not (gs == -1 or (gs > 0 and gs % per == 0)):
            raise ConfigError(
                f"--group-size {gs}: use -1 or a positive multiple of {per} for {self.format}"
            )
        if layout == "awq" and gs == -1:
            raise ConfigError("--group-size -1: the awq layout needs groups (e.g. 128)")
        if self.shard_bytes < 1:
            raise ConfigError("the shard size must be positive")

    @property
    def bits(self) -> int:
        return 4 if self.format == "int4" else 8

    @property
    def resolved_layout(self) -> str:
        if self.format == "fp8":
            return self.layout or "fp8"
        return self.layout or "gptq"

    def quantization_config(self) -> dict[str, Any]:
        layout = self.resolved_layout
        if layout == CT:
            return self._ct_config()
        if layout == "autofp8":  # as AutoFP8's save_quantized_model writes it
            return {
                "quant_method": "fp8",
                "activation_scheme": "dynamic",
                "ignored_layers": [] if self.head == "fp8" else [HEAD],
            }
        if layout == "fp8":
            return {
                "quant_method": "fp8",
                "fmt": "e4m3",
                "activation_scheme": "dynamic",
                "weight_block_size": list(FP8_BLOCK),
                "modules_to_not_convert": [] if self.head == "fp8" else [HEAD],
            }
        gs = 128 if self.group_size is None else self.group_size
        if layout == "awq":
            return {
                "quant_method": "awq",
                "bits": 4,
                "group_size": gs,
                "zero_point": True,
                "version": "gemm",
                "modules_to_not_convert": None,
            }
        d: dict[str, Any] = {
            "quant_method": "gptq",
            "bits": self.bits,
            "group_size": gs,
            "sym": self.sym,
            "desc_act": False,
            "checkpoint_format": "gptq",
            "lm_head": self.head in HEAD_BITS,
            "meta": {"quantizer": [f"evokernel:{__version__}"], "method": "round-to-nearest"},
        }
        if self.head in HEAD_BITS and HEAD_BITS[self.head] != self.bits:
            d["dynamic"] = {f"+:{HEAD}": {"bits": HEAD_BITS[self.head]}}
        return d

    def _ct_config(self) -> dict[str, Any]:
        """compressed-tensors' QuantizationConfig as llm-compressor saves it."""
        if self.format == "fp8":
            fmt = "naive-quantized"
            weights: dict[str, Any] = {
                "num_bits": 8, "type": "float", "symmetric": True, "strategy": "block",
                "block_structure": list(FP8_BLOCK), "group_size": None, "dynamic": False,
                "actorder": None,
            }  # fmt: skip
            head_weights = None
        else:
            fmt = "pack-quantized"
            gs = 128 if self.group_size is None else self.group_size

            def ints(bits: int) -> dict[str, Any]:
                return {
                    "num_bits": bits, "type": "int", "symmetric": self.sym,
                    "strategy": "channel" if gs == -1 else "group",
                    "group_size": None if gs == -1 else gs, "block_structure": None,
                    "dynamic": False, "actorder": None,
                }  # fmt: skip

            weights = ints(self.bits)
            head_bits = HEAD_BITS.get(self.head)
            head_weights = ints(head_bits) if head_bits not in (None, self.bits) else None

        def group(targets: list[str], w: dict[str, Any]) -> dict[str, Any]:
            return {
                "targets": targets, "weights": w, "input_activations": None,
                "output_activations": None, "format": fmt,
            }  # fmt: skip

        groups = {"group_0": group(["Linear"], weights)}
        if head_weights is not None:
            groups["group_1"] = group([HEAD], head_weights)
        return {
            "quant_method": CT,
            "format": fmt,
            "quantization_status": "compressed",
            "config_groups": groups,
            "ignore": [HEAD] if self.head == "bf16" else [],
            "kv_cache_scheme": None,
            "sparsity_config": {},
            "transform_config": {},
            "global_compression_ratio": None,
            "version": f"evokernel {__version__}",
        }


def write_quantized(
    model_dir: str | Path, out_dir: str | Path, opts: QuantizeOptions
) -> dict[str, Any]:
    """Quantize the dense checkpoint in `model_dir` into `out_dir` (new or empty)."""
    src = Path(model_dir)
    cfg = ModelConfig.from_dir(src)
    if cfg.quantization is not None:
        raise ConfigError(
            f"{src}: already quantized (quant_method {cfg.quantization.method}); "
            "quantize a dense checkpoint"
        )
    ckpt = inspect_checkpoint(src, cfg)
    raw = read_json_object(src / "config.json")
    raw["quantization_config"] = opts.quantization_config()
    if opts.head != "bf16":
        raw["tie_word_embeddings"] = False
    out_cfg = ModelConfig.from_hf_dict(raw, "the quantized config.json")
    shapes, packed = quantized_tensors(out_cfg, _named(out_cfg))  # refuses odd shapes
    specs = [TensorSpec(n, _dtype(n, packed, ckpt), s) for n, s in shapes.items()]
    out = _prepare(Path(out_dir), src)
    source = _Source(ckpt, out_cfg)
    try:
        files = _write_tensors(out, specs, source.produce, opts.shard_bytes)
    except OSError as err:
        raise ConfigError(f"{out}: cannot write the checkpoint ({err.strerror or err})") from None
    finally:
        source.close()
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    copied = _copy_other_files(src, out)
    return {
        "out_dir": str(out),
        "format": opts.format,
        "layout": opts.resolved_layout,
        "head": opts.head,
        "quantization_config": raw["quantization_config"],
        "files": files,
        "copied": copied,
        "weight_bytes": sum(s.nbytes for s in specs),
        "source_bytes": ckpt.weight_bytes,
        # what a decode step reads: everything but the embedding table (one row of it)
        "step_bytes": sum(s.nbytes for s in specs if s.name != EMBED),
        "source_step_bytes": _dense_step_bytes(ckpt),
        "method": "round-to-nearest",
    }


class _Source:
    """Produces each output tensor: dense ones copied from the source, a packed module's
    tensors quantized together on its first request and handed out from a small cache."""

    def __init__(self, ckpt: Checkpoint, out_cfg: ModelConfig) -> None:
        self.ckpt = ckpt
        self.maps: dict[int, TensorMap] = {}
        self.specs: dict[str, ModuleSpec] = {
            m.prefix: m.spec for m in all_modules(out_cfg) if m.spec is not None
        }
        self.cache: dict[str, torch.Tensor] = {}

    def read(self, name: str) -> torch.Tensor:
        if name == "lm_head.weight" and name not in self.ckpt.tensors:
            # the head of a tied checkpoint, now quantized on its own
            name = "model.embed_tokens.weight"
        header, _ = self.ckpt.tensors[name]
        tmap = self.maps.setdefault(id(header), TensorMap(header))
        out = tmap.view(name).clone()
        tmap.release(name)
        return out

    def produce(self, spec: TensorSpec) -> torch.Tensor:
        if spec.name in self.cache:
            return self.cache.pop(spec.name)
        prefix, _, suffix = spec.name.rpartition(".")
        module = self.specs.get(prefix)
        if module is None or suffix == "bias":  # a quantized module's bias stays dense
            return self.read(spec.name).to(spec.dtype)
        tensors = _quantize_module(self.read(f"{prefix}.weight"), module)
        for key, t in tensors.items():
            self.cache[f"{prefix}.{key}"] = t
        return self.cache.pop(spec.name)

    def close(self) -> None:
        for tmap in self.maps.values():
            tmap.close()


def _dense_step_bytes(ckpt: Checkpoint) -> int:
    total = sum(e.nbytes for n, (_, e) in ckpt.tensors.items() if n != EMBED)
    if ckpt.head_is_tied():
        total += ckpt.tensors[EMBED][1].nbytes  # the embedding serves as the head
    return total


def _quantize_module(w: torch.Tensor, spec: ModuleSpec) -> dict[str, torch.Tensor]:
    if spec.method == "fp8" and spec.block == (CT_WHOLE, CT_WHOLE):  # AutoFP8's names
        weight, scale = quantize.fp8_tensor(w)
        return {"weight": weight, "weight_scale": scale}
    if spec.method in ("fp8", "ct-fp8"):
        weight, scale = quantize.fp8_block(w, spec.block)
        name = "weight_scale_inv" if spec.method == "fp8" else "weight_scale"
        return {"weight": weight, name: scale}
    min_zero = 1 if spec.zero_offset == 1 and not spec.sym else 0
    q, scales, zeros = quantize.int_groups(w, spec.bits, spec.group_size, spec.sym, min_zero)
    if spec.method == "ct-int":
        return quantize.ct_int_tensors(q, scales, zeros, spec.bits, spec.sym)
    if spec.method == "awq":
        return quantize.awq_tensors(q, scales, zeros)
    v1 = spec.zero_offset == 1
    return quantize.gptq_tensors(q, scales, zeros, spec.bits, spec.group_size, v1)


def _dtype(name: str, packed: dict[str, tuple[str, ...]], ckpt: Checkpoint) -> torch.dtype:
    """A dense tensor keeps its stored dtype; a packed one takes the layout's."""
    if name not in packed:
        _, entry = ckpt.tensors[name]
        return STORAGE_DTYPES[entry.dtype]
    suffix = name.rpartition(".")[2]
    if suffix == "weight_scale" and "F8_E4M3" in packed.get(
        name.rpartition(".")[0] + ".weight", ()
    ):
        return torch.float32  # compressed-tensors FP8 block scales
    return STORAGE_DTYPES[PACKED_DTYPES.get(suffix, "I32")]


def _named(cfg: ModelConfig) -> set[str]:
    """The optional tensor names the written layout holds: a GPTQ module's g_idx (GPTQ
    writers always store one); a per-tensor FP8 module's scale under AutoFP8's name."""
    names = set()
    for m in all_modules(cfg):
        if m.spec is not None and m.spec.method == "gptq":
            names.add(f"{m.prefix}.g_idx")
        if m.spec is not None and m.spec.method == "fp8" and m.spec.block == (CT_WHOLE, CT_WHOLE):
            names.add(f"{m.prefix}.weight_scale")
    return names


def _write_tensors(out: Path, specs: list[TensorSpec], produce: Any, shard_bytes: int) -> list[str]:
    groups: list[list[TensorSpec]] = [[]]
    size = 0
    for s in specs:
        if groups[-1] and size + s.nbytes > shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(s)
        size += s.nbytes
    if len(groups) == 1:
        write_file(out / SINGLE_FILE, specs, produce, METADATA)
        return [SINGLE_FILE]
    names = [f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors" for k in range(len(groups))]
    weight_map: dict[str, str] = {}
    for name, group in zip(names, groups):
        write_file(out / name, group, produce, METADATA)
        weight_map |= {s.name: name for s in group}
    index = {"metadata": {"total_size": sum(s.nbytes for s in specs)}, "weight_map": weight_map}
    (out / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    return [*names, INDEX_FILE]


def _prepare(out: Path, src: Path) -> Path:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: exists and is not a directory")
    if out.exists() and out.resolve() == src.resolve():
        raise ConfigError(f"{out}: the output must not be the source checkpoint")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out}: not empty; refusing to write there")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{out}: cannot create the directory ({err.strerror or err})") from None
    return out


def _copy_other_files(src: Path, out: Path) -> list[str]:
    """Everything but the weights and config.json: tokenizer, chat template, generation
    config, README, license."""
    copied = []
    for path in sorted(src.iterdir()):
        name = path.name
        if not path.is_file() or name == "config.json" or name.endswith(".safetensors"):
            continue
        if name == INDEX_FILE:
            continue
        shutil.copy2(path, out / name)
        copied.append(name)
    return copied
