"""Which tensors a quantized checkpoint holds, with their shapes and dtypes, per published layout.

A linear module with HF prefix P ([N, K] = [out_features, in_features]) is stored as

  fp8   P.weight            F8_E4M3          [N, K]
        P.weight_scale_inv  F32 | BF16 | F16 [ceil(N / bn), ceil(K / bk)]
        per tensor: P.weight_scale_inv (transformers) or P.weight_scale (AutoFP8), one
        value ([] or [1]); static activations: P.activation_scale or P.input_scale, likewise
  gptq  P.qweight           I32  [K / p, N]   p = 32 / bits values per int32, along K
        P.qzeros            I32  [G, N / p]   packed along N; v1 stores zero - 1
        P.scales            F16 | BF16 | F32 [G, N]      G = ceil(K / group_size)
        P.g_idx             I32  [K]         group of each input column (required with
                                              desc_act, accepted without)
  awq   P.qweight           I32  [K, N / 8]   8 nibbles per int32 along N, in the order
                                              0, 2, 4, 6, 1, 3, 5, 7
        P.qzeros            I32  [K / gs, N / 8]  (same packing)
        P.scales            F16 | BF16 | F32 [K / gs, N]
  ct-int  (compressed-tensors pack-quantized)
        P.weight_packed     I32  [N, K / p]   p values per int32 along K, value + 2**(bits-1)
        P.weight_scale      F16 | BF16 | F32 [N, G]   (strategy channel: G = 1)
        P.weight_zero_point I32  [N / p, G]   asymmetric only; packed along N, zero + 2**(b-1)
        P.weight_shape      I64 | I32 [2]     [N, K]
        P.weight_g_idx      I32  [K]          actorder "group" only
  ct-int8 (compressed-tensors int-quantized)
        P.weight            I8   [N, K]       signed
        P.weight_scale      F16 | BF16 | F32 [N, G]
        P.weight_zero_point I8   [N, G]       asymmetric only, signed
  ct-fp8  (compressed-tensors float-quantized, naive-quantized)
        P.weight            F8_E4M3          [N, K]
        P.weight_scale      F32 | BF16 | F16 [N, 1] channel, [1] tensor, [ceil(N / bn),
                                              ceil(K / bk)] block

(AutoGPTQ `QuantLinear.pack`, AutoAWQ `WQLinear_GEMM.from_linear`, transformers'
`FineGrainedFP8` integration, AutoFP8's `save_quantized_model`, compressed-tensors'
`PackedQuantizationCompressor` and
`pack_to_int32`, `FloatQuantizationCompressor`.) Every other tensor is as in a dense checkpoint
(`weights.hf_shapes`). A module whose shape a layout cannot hold (GPTQ needs K and N
multiples of p; AWQ needs K a multiple of the group and N of 8) is refused in one line.

The engine packs q/k/v and gate/up rows into one projection (`PROJECTION_PARTS`), so the
parts of one projection must be stored alike: all dense or all in one `ModuleSpec`.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from evokernel.errors import CheckpointError
from evokernel.model.config import ModelConfig
from evokernel.model.quant.config import CT_WHOLE, HEAD, ModuleSpec, QuantConfig
from evokernel.model.quant.packed import cdiv
from evokernel.model.weights import hf_shapes

SCALE_DTYPES = ("F32", "BF16", "F16")
INT_DTYPES = ("I32",)
# projection field -> its HF modules under `model.layers.{i}.`, in row order
PROJECTION_PARTS: dict[str, tuple[str, ...]] = {
    "qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "o_proj": ("self_attn.o_proj",),
    "gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
    "down_proj": ("mlp.down_proj",),
}


@dataclass(frozen=True)
class Module:
    """One linear module of the checkpoint: its HF prefix, shape and storage."""

    prefix: str
    rows: int  # N, out_features
    cols: int  # K, in_features
    spec: ModuleSpec | None  # None: dense `prefix.weight`


def quant_config(cfg: ModelConfig) -> QuantConfig:
    q = cfg.quantization
    assert q is not None, "not a quantized config"
    return q


def module_shape(cfg: ModelConfig, module: str) -> tuple[int, int]:
    """[N, K] of a layer module (`self_attn.q_proj`, ...) or of `lm_head`."""
    H, inter = cfg.hidden_size, cfg.intermediate_size
    shapes = {
        "self_attn.q_proj": (cfg.q_size, H),
        "self_attn.k_proj": (cfg.kv_size, H),
        "self_attn.v_proj": (cfg.kv_size, H),
        "self_attn.o_proj": (H, cfg.q_size),
        "mlp.gate_proj": (inter, H),
        "mlp.up_proj": (inter, H),
        "mlp.down_proj": (H, inter),
        HEAD: (cfg.vocab_size, H),
    }
    return shapes[module]


def layer_modules(cfg: ModelConfig, layer: int, field: str) -> list[Module]:
    """The modules filling projection `field` of `layer`, checked to be stored alike."""
    q = quant_config(cfg)
    modules = []
    for name in PROJECTION_PARTS[field]:
        prefix = f"model.layers.{layer}.{name}"
        rows, cols = module_shape(cfg, name)
        modules.append(Module(prefix, rows, cols, q.spec(prefix)))
    first = modules[0]
    for m in modules[1:]:
        if m.spec != first.spec:
            raise CheckpointError(
                f"config.json: {m.prefix} is stored as {_label(m.spec)} but {first.prefix} as "
                f"{_label(first.spec)}; the modules packed into one projection ({field}) must "
                "share one format"
            )
    return modules


def head_module(cfg: ModelConfig) -> Module | None:
    """The separate head (None when tied: the dense embedding serves as the head)."""
    if cfg.tie_word_embeddings:
        return None
    rows, cols = module_shape(cfg, HEAD)
    return Module(HEAD, rows, cols, quant_config(cfg).spec(HEAD))


def all_modules(cfg: ModelConfig) -> list[Module]:
    out = [
        m
        for i in range(cfg.num_hidden_layers)
        for field in PROJECTION_PARTS
        for m in layer_modules(cfg, i, field)
    ]
    head = head_module(cfg)
    return [*out, head] if head is not None else out


def module_tensors(
    m: Module, present: set[str]
) -> dict[str, tuple[tuple[int, ...], tuple[str, ...]]]:
    """name -> (shape, allowed safetensors dtypes) of the tensors storing module `m`
    (`present`: the checkpoint's tensor names, for the optional `g_idx`)."""
    P, N, K, spec = m.prefix, m.rows, m.cols, m.spec
    if spec is None:
        return {f"{P}.weight": ((N, K), ())}  # () = the dense dtypes
    if spec.method == "fp8":
        bn, bk = spec.block
        fp8: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
            f"{P}.weight": ((N, K), ("F8_E4M3",))
        }
        if spec.block == (CT_WHOLE, CT_WHOLE):
            fp8[fp8_scale_name(P, present)] = ((), SCALE_DTYPES)
        else:
            fp8[f"{P}.weight_scale_inv"] = ((cdiv(N, bn), cdiv(K, bk)), SCALE_DTYPES)
        if spec.act_scale:
            fp8[fp8_act_scale_name(P, present)] = ((), SCALE_DTYPES)
        return fp8
    if spec.method == "ct-fp8":
        bn, bk = spec.block
        scale = (1,) if spec.block == (CT_WHOLE, CT_WHOLE) else (cdiv(N, bn or N), cdiv(K, bk or K))
        return {
            f"{P}.weight": ((N, K), ("F8_E4M3",)),
            f"{P}.weight_scale": (scale, SCALE_DTYPES),
        }
    per = 32 // spec.bits
    gs = K if spec.group_size == -1 else spec.group_size
    what = f"{P} [{N}, {K}] cannot be stored as {spec.method} {spec.label}"
    if spec.method == "ct-int8":
        G = cdiv(K, gs)
        raw: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
            f"{P}.weight": ((N, K), ("I8",)),
            f"{P}.weight_scale": ((N, G), SCALE_DTYPES),
        }
        if not spec.sym:
            raw[f"{P}.weight_zero_point"] = ((N, G), ("I8",))
        return raw
    if spec.method == "ct-int":
        if K % per or (not spec.sym and N % per):
            raise CheckpointError(
                f"config.json: {what} (packed {per} values per int32: in_features, and "
                f"with zero points out_features, must be multiples of {per})"
            )
        G = cdiv(K, gs)
        ct: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
            f"{P}.weight_packed": ((N, K // per), INT_DTYPES),
            f"{P}.weight_scale": ((N, G), SCALE_DTYPES),
            f"{P}.weight_shape": ((2,), ("I64", "I32")),
        }
        if not spec.sym:
            ct[f"{P}.weight_zero_point"] = ((N // per, G), INT_DTYPES)
        if spec.desc_act:
            ct[f"{P}.weight_g_idx"] = ((K,), INT_DTYPES)
        return ct
    if spec.method == "gptq":
        if K % per or N % per:
            raise CheckpointError(
                f"config.json: {what} (GPTQ packs {per} values per int32: in_features and "
                f"out_features must be multiples of {per})"
            )
        G = cdiv(K, gs)
        out: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
            f"{P}.qweight": ((K // per, N), INT_DTYPES),
            f"{P}.qzeros": ((G, N // per), INT_DTYPES),
            f"{P}.scales": ((G, N), SCALE_DTYPES),
        }
        if spec.desc_act or f"{P}.g_idx" in present:
            out[f"{P}.g_idx"] = ((K,), INT_DTYPES)
        return out
    if K % gs or N % 8:
        raise CheckpointError(
            f"config.json: {what} (AWQ needs in_features a multiple of the group size and "
            "out_features a multiple of 8)"
        )
    return {
        f"{P}.qweight": ((K, N // 8), INT_DTYPES),
        f"{P}.qzeros": ((K // gs, N // 8), INT_DTYPES),
        f"{P}.scales": ((K // gs, N), SCALE_DTYPES),
    }


def fp8_scale_name(prefix: str, present: Container[str]) -> str:
    """A per-tensor FP8 module's weight scale: AutoFP8's `weight_scale` where the checkpoint
    holds one, else transformers' `weight_scale_inv` (the same multiplier either way)."""
    name = f"{prefix}.weight_scale"
    return name if name in present else f"{prefix}.weight_scale_inv"


def fp8_act_scale_name(prefix: str, present: Container[str]) -> str:
    """A static FP8 module's activation scale: AutoFP8's `input_scale` where the checkpoint
    holds one or names its weight scale as AutoFP8 does, else transformers'
    `activation_scale`."""
    autofp8 = f"{prefix}.input_scale" in present or f"{prefix}.weight_scale" in present
    return f"{prefix}.input_scale" if autofp8 else f"{prefix}.activation_scale"


def quantized_tensors(
    cfg: ModelConfig, present: set[str]
) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[str, ...]]]:
    """Every tensor name the quantized checkpoint of `cfg` holds -> its shape, and the
    allowed dtypes of the packed ones (dense tensors: BF16, F16, F32)."""
    shapes = hf_shapes(cfg)
    dtypes: dict[str, tuple[str, ...]] = {}
    for m in all_modules(cfg):
        if m.spec is None:
            continue
        shapes.pop(f"{m.prefix}.weight", None)
        for name, (shape, allowed) in module_tensors(m, present).items():
            shapes[name] = shape
            dtypes[name] = allowed
    return shapes, dtypes


def _label(spec: ModuleSpec | None) -> str:
    return "dense" if spec is None else f"{spec.method} {spec.label}"
