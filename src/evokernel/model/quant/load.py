"""A checked quantized checkpoint -> `ModelWeights` whose projections are packed weights.

    weights = load_quantized(ckpt, device, dtype)   # ckpt = inspect_checkpoint(dir, cfg)

`model/loader.py` calls this when the config has a `quantization_config`. The checkpoint has
already been checked against the layout's names, shapes and dtypes (layout.py, through
`inspect_checkpoint`), so nothing here can meet a tensor of the wrong shape. Layer by layer,
each module's published tensors go from their memory-mapped files to the device, are
converted there into the packed layout (convert.py), and the parts of one projection (q/k/v,
gate/up) are concatenated along the output rows (packed.py `concat`); each file's pages are
dropped once copied. Dense tensors (embedding, norms, biases, modules the config leaves
dense) are converted to `dtype` as the dense loader does. Scales, like every dense tensor,
are checked finite on the device with one host sync at the end (finite.py).
"""

from __future__ import annotations

import torch

from evokernel.errors import CheckpointError
from evokernel.model.checkpoint import Checkpoint
from evokernel.model.finite import FiniteCheck
from evokernel.model.quant.config import CT_WHOLE
from evokernel.model.quant.convert import (
    awq_module,
    ct_fp8_module,
    ct_int8_module,
    ct_int_module,
    fp8_module,
    gptq_module,
)
from evokernel.model.quant.layout import (
    PROJECTION_PARTS,
    Module,
    fp8_act_scale_name,
    fp8_scale_name,
    head_module,
    layer_modules,
)
from evokernel.model.quant.packed import concat
from evokernel.model.safetensors_io import TensorMap
from evokernel.model.weights import LayerWeights, ModelWeights, PackedWeight, Weight


class _Reader:
    """Tensors of the checkpoint on the device, one at a time; pages dropped once copied."""

    def __init__(self, ckpt: Checkpoint, device: torch.device) -> None:
        self.ckpt, self.device = ckpt, device
        self.maps: dict[int, TensorMap] = {}
        self.finite = FiniteCheck()

    def raw(self, name: str) -> torch.Tensor:
        """The stored tensor on the device, in its stored dtype."""
        header, _ = self._where(name)
        tmap = self.maps.get(id(header))
        if tmap is None:
            tmap = self.maps[id(header)] = TensorMap(header)
        out = tmap.view(name).to(self.device, copy=True)
        tmap.release(name)
        return out

    def dense(self, name: str, dtype: torch.dtype, check: bool = True) -> torch.Tensor:
        out = self.raw(name).to(dtype)
        if check:
            self.finite.add(name, out)
        return out

    def scales(self, name: str) -> torch.Tensor:
        out = self.raw(name)
        self.finite.add(name, out)
        return out

    def _where(self, name: str):  # type: ignore[no-untyped-def]
        if name == "lm_head.weight" and self.ckpt.stored_head is not None:
            return self.ckpt.stored_head
        return self.ckpt.tensors[name]

    def close(self) -> None:
        for tmap in self.maps.values():
            tmap.close()


def load_quantized(ckpt: Checkpoint, device: torch.device, dtype: torch.dtype) -> ModelWeights:
    cfg = ckpt.cfg
    reader = _Reader(ckpt, device)
    try:
        embed = reader.dense("model.embed_tokens.weight", dtype)
        layers = [_layer(reader, i, dtype) for i in range(cfg.num_hidden_layers)]
        final_norm = reader.dense("model.norm.weight", dtype)
        head: Weight
        module = head_module(cfg)
        if module is not None:
            head = _projection(reader, [module], dtype)
        elif ckpt.head_is_tied():
            head = embed
        else:  # a tied config storing a different dense head (checkpoint.py)
            head = reader.dense("lm_head.weight", dtype)
        reader.finite.verify(ckpt)
    finally:
        reader.close()
    return ModelWeights(embed_tokens=embed, layers=layers, final_norm=final_norm, lm_head=head)


def _layer(reader: _Reader, i: int, dtype: torch.dtype) -> LayerWeights:
    cfg = reader.ckpt.cfg
    p = f"model.layers.{i}."
    fields: dict[str, Weight | None] = {
        "input_norm": reader.dense(p + "input_layernorm.weight", dtype),
        "post_attn_norm": reader.dense(p + "post_attention_layernorm.weight", dtype),
    }
    for field in PROJECTION_PARTS:
        fields[field] = _projection(reader, layer_modules(cfg, i, field), dtype)
    if cfg.qkv_bias:
        parts = ("q_proj", "k_proj", "v_proj")
        fields["qkv_bias"] = torch.cat(
            [reader.dense(f"{p}self_attn.{name}.bias", dtype) for name in parts]
        )
    if cfg.qk_norm:
        fields["q_norm"] = reader.dense(p + "self_attn.q_norm.weight", dtype)
        fields["k_norm"] = reader.dense(p + "self_attn.k_norm.weight", dtype)
    return LayerWeights(**fields)  # type: ignore[arg-type]


def _projection(reader: _Reader, modules: list[Module], dtype: torch.dtype) -> Weight:
    """One projection from its modules (all dense, or all in one spec: layout.py)."""
    if modules[0].spec is None:
        parts = [reader.dense(f"{m.prefix}.weight", dtype) for m in modules]
        return parts[0] if len(parts) == 1 else torch.cat(parts)
    packed = [_module(reader, m) for m in modules]
    perms = [getattr(p, "perm", None) for p in packed]
    first = perms[0]
    if first is None:
        shared = all(p is None for p in perms)
    else:
        shared = all(p is not None and torch.equal(p, first) for p in perms)
    if not shared:
        spec = modules[0].spec
        suffix = "weight_g_idx" if spec is not None and spec.method == "ct-int" else "g_idx"
        names = ", ".join(f"{m.prefix}.{suffix}" for m in modules)
        raise CheckpointError(
            f"tensors {names} order their columns differently; modules packed into one "
            "projection must share their act-order"
        )
    return concat(packed)


def _module(reader: _Reader, m: Module) -> PackedWeight:
    spec, P = m.spec, m.prefix
    assert spec is not None
    if spec.method == "fp8":
        if spec.act_scale:  # static activations: the scale is checked finite, not applied
            reader.scales(fp8_act_scale_name(P, reader.ckpt.tensors))
        if spec.block == (CT_WHOLE, CT_WHOLE):  # one scale a module, as compressed-tensors'
            scale = reader.scales(fp8_scale_name(P, reader.ckpt.tensors))
            return ct_fp8_module(P, reader.raw(f"{P}.weight"), scale, spec)
        return fp8_module(
            P, reader.raw(f"{P}.weight"), reader.scales(f"{P}.weight_scale_inv"), spec
        )
    if spec.method == "ct-fp8":
        return ct_fp8_module(P, reader.raw(f"{P}.weight"), reader.scales(f"{P}.weight_scale"), spec)
    if spec.method == "ct-int8":
        zero = reader.raw(f"{P}.weight_zero_point") if not spec.sym else None
        return ct_int8_module(
            P, reader.raw(f"{P}.weight"), reader.scales(f"{P}.weight_scale"), zero, spec, m.cols
        )
    if spec.method == "ct-int":
        zero = reader.raw(f"{P}.weight_zero_point") if not spec.sym else None
        g_idx = reader.raw(f"{P}.weight_g_idx") if spec.desc_act else None
        return ct_int_module(
            P,
            reader.raw(f"{P}.weight_packed"),
            reader.scales(f"{P}.weight_scale"),
            zero,
            reader.raw(f"{P}.weight_shape"),
            g_idx,
            spec,
            m.rows,
            m.cols,
        )
    qweight, qzeros = reader.raw(f"{P}.qweight"), reader.raw(f"{P}.qzeros")
    scales = reader.scales(f"{P}.scales")
    if spec.method == "gptq":
        g_name = f"{P}.g_idx"
        g_idx = reader.raw(g_name) if g_name in reader.ckpt.tensors else None
        return gptq_module(P, qweight, qzeros, scales, g_idx, spec, m.rows, m.cols)
    return awq_module(P, qweight, qzeros, scales, spec, m.rows, m.cols)
