"""An independent writer of quantized checkpoints in the published layouts, for the tests.

Written from the publishers' own packing code, not from evokernel's (model/quant/): plain
numpy loops, the `safetensors` package for the files. Each writer takes a dense checkpoint
directory and writes a quantized copy, and returns the dense float32 weight every quantized
module stands for (its own dequantization), by HF module prefix, so that tests compare what
our loader and kernels compute against values derived here.

  GPTQ  AutoGPTQ `auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py`, `QuantLinear.pack`:
        intweight = round((W + zeros * scales) / scales) per column's group; qweight rows
        pack 32 / bits consecutive input columns, lowest bits first (`qweight[row] |=
        intweight[j] << (bits * (j - i))`); `zeros -= 1` then qzeros columns pack 32 / bits
        consecutive output rows the same way; scales [G, N] float16; g_idx [K]. Its forward
        reads `zeros + 1` (v1). Act-order (desc_act) as GPTQ's `fasterquant`: columns are
        quantized in a permuted order and `g_idx[perm[i]] = i // group_size`.
  AWQ   AutoAWQ `awq/modules/linear/gemm.py`, `WQLinear_GEMM.from_linear`: intweight [K, N],
        each int32 of qweight [K, N/8] holds columns `col * 8 + order_map[i]` at bits 4i with
        `order_map = [0, 2, 4, 6, 1, 3, 5, 7]`; qzeros [K/gs, N/8] likewise; dequantization
        (q - z) * s.
  FP8   transformers `integrations/finegrained_fp8.py`, `Fp8Quantize`: per [bn, bk] block
        scale = 448 / amax (1 for an all-zero block), weight = clamp(w * scale, -448, 448) in
        float8_e4m3fn, stored `weight_scale_inv` = 1 / scale; Qwen's FP8 checkpoints keep the
        head and norms out (`modules_to_not_convert`).
  FP8, one scale a module: AutoFP8 `auto_fp8/quantize.py` (neuralmagic/AutoFP8),
        `per_tensor_quantize`, in the weight's own dtype as it runs: scale = finfo(e4m3).max
        / max(|min|, |max|) (amax clamped to >= 1e-12), weight = clamp(w * scale, -448, 448)
        in float8_e4m3fn, stored
        `weight_scale` = 1 / scale, a 0-dim float32; static activations add `input_scale`
        (0-dim, calibrated); `save_quantized_model` writes `quantization_config`
        {quant_method "fp8", activation_scheme, ignored_layers} and `get_layers_to_ignore`
        always puts "lm_head" in `ignored_layers`. transformers' per-tensor FP8 (`FP8Linear`
        with `block_size` None) names them `weight_scale_inv` and `activation_scale` and
        writes `weight_block_size: null`, `modules_to_not_convert`.

The quantizer is GPTQ's min-max `Quantizer.find_params` (per group, range including 0; sym:
zero at 2**(bits-1)), zero points clamped to >= 1 for v1 so the stored zero - 1 never wraps.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# the engine's projections and the HF modules packed into each, in row order
PARTS = {
    "qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "o_proj": ("self_attn.o_proj",),
    "gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
    "down_proj": ("mlp.down_proj",),
}


def projection(ref: dict[str, torch.Tensor], layer: int, field: str) -> torch.Tensor:
    """A writer's dense values of projection `field` of `layer`, its modules' rows stacked."""
    return torch.cat([ref[f"model.layers.{layer}.{p}"] for p in PARTS[field]])


def _read(src: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(src.glob("*.safetensors")):
        with safe_open(f, framework="pt") as fh:
            for k in fh.keys():  # noqa: SIM118 (safe_open has no __iter__)
                out[k] = fh.get_tensor(k)
    return out


def _modules(tensors: dict[str, torch.Tensor], head: bool) -> list[str]:
    names = [k[: -len(".weight")] for k in tensors if k.endswith(".weight")]
    out = [n for n in names if n.rsplit(".", 1)[-1] in LINEAR]
    if head and "lm_head.weight" in tensors:
        out.append("lm_head")
    return out


def _input_of(name: str) -> str:
    """Modules reading the same input share GPTQ's Hessian, hence its act-order."""
    parent, _, leaf = name.rpartition(".")
    if leaf in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"):
        return f"{parent}/{leaf in ('gate_proj', 'up_proj')}"
    return name


def _minmax(w: np.ndarray, bits: int, sym: bool, min_zero: int) -> tuple[np.ndarray, np.ndarray]:
    """GPTQ's Quantizer.find_params over the last axis -> (scale float16-rounded, zero)."""
    maxq = 2**bits - 1
    xmin = np.minimum(w.min(-1), 0)
    xmax = np.maximum(w.max(-1), 0)
    if sym:
        xmax = np.maximum(np.abs(xmin), xmax)
        xmin = np.where(xmin < 0, -xmax, xmin)
    both = (xmin == 0) & (xmax == 0)
    xmin, xmax = np.where(both, -1, xmin), np.where(both, 1, xmax)
    scale = ((xmax - xmin) / maxq).astype(np.float16).astype(np.float32)
    zero = np.full_like(scale, (maxq + 1) // 2) if sym else np.round(-xmin / scale)
    return scale, np.clip(zero, min_zero, maxq)


def write_gptq(
    src: Path,
    dst: Path,
    bits: int,
    group_size: int,
    sym: bool = True,
    desc_act: bool = False,
    head: bool = False,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    tensors = _read(src)
    rng = np.random.default_rng(seed)
    out: dict[str, torch.Tensor] = {}
    dense: dict[str, torch.Tensor] = {}
    orders: dict[str, np.ndarray] = {}  # one act-order per input (q/k/v and gate/up share)
    for name in _modules(tensors, head):
        W = tensors.pop(name + ".weight").float().numpy().astype(np.float32)
        N, K = W.shape
        gs = K if group_size == -1 else group_size
        key = _input_of(name)
        if desc_act:
            orders.setdefault(key, rng.permutation(K))
            perm = orders[key]
        else:
            perm = np.arange(K)
        g_idx = np.zeros(K, dtype=np.int32)
        g_idx[perm] = np.arange(K) // gs
        G = -(-K // gs)
        scales = np.zeros((G, N), dtype=np.float32)
        zeros = np.zeros((G, N), dtype=np.int64)
        for g in range(G):
            cols = perm[g * gs : (g + 1) * gs]
            s, z = _minmax(W[:, cols], bits, sym, min_zero=1)
            scales[g], zeros[g] = s, z
        # QuantLinear.pack: intweight[:, k] = round((W[:, k] + z * s) / s) with k's group
        intweight = np.zeros((N, K), dtype=np.int64)
        for k in range(K):
            g = g_idx[k]
            intweight[:, k] = np.round((W[:, k] + zeros[g] * scales[g]) / scales[g])
        intweight = np.clip(intweight, 0, 2**bits - 1)
        intweight_t = intweight.T.astype(np.uint32)  # [K, N]
        per = 32 // bits
        qweight = np.zeros((K // per, N), dtype=np.uint32)
        for row in range(K // per):
            for j in range(per):
                qweight[row] |= intweight_t[row * per + j] << np.uint32(bits * j)
        stored = ((zeros - 1) & (2**bits - 1)).astype(np.uint32)  # zeros -= 1 (v1)
        qzeros = np.zeros((G, N // per), dtype=np.uint32)
        for col in range(N // per):
            for j in range(per):
                qzeros[:, col] |= stored[:, col * per + j] << np.uint32(bits * j)
        out[name + ".qweight"] = torch.from_numpy(qweight.view(np.int32).copy())
        out[name + ".qzeros"] = torch.from_numpy(qzeros.view(np.int32).copy())
        out[name + ".scales"] = torch.from_numpy(scales.astype(np.float16))
        out[name + ".g_idx"] = torch.from_numpy(g_idx)
        deq = (intweight - zeros[g_idx].T) * scales[g_idx].T  # the forward's (q - z) * s
        dense[name] = torch.from_numpy(deq.astype(np.float32))
    out.update(tensors)
    config = {
        "quant_method": "gptq",
        "bits": bits,
        "group_size": group_size,
        "desc_act": desc_act,
        "sym": sym,
        "damp_percent": 0.01,
        "true_sequential": True,
        "static_groups": False,
        "checkpoint_format": "gptq",
        "lm_head": head,
        "meta": {"quantizer": ["tests:published"]},
    }
    _finish(src, dst, out, config, untie=head)
    return dense


def write_awq(src: Path, dst: Path, group_size: int = 32) -> dict[str, torch.Tensor]:
    tensors = _read(src)
    out: dict[str, torch.Tensor] = {}
    dense: dict[str, torch.Tensor] = {}
    order_map = [0, 2, 4, 6, 1, 3, 5, 7]
    for name in _modules(tensors, head=False):
        W = tensors.pop(name + ".weight").float().numpy().astype(np.float32)
        N, K = W.shape
        G = K // group_size
        s, z = _minmax(W.reshape(N, G, group_size), 4, sym=False, min_zero=0)  # [N, G]
        scales, zeros = s.T.copy(), z.T.astype(np.int64)  # [G, N]
        intweight = np.zeros((K, N), dtype=np.int64)
        for idx in range(K):  # from_linear: round((W[:, idx] + z*s) / s), then transposed
            g = idx // group_size
            intweight[idx] = np.round((W[:, idx] + zeros[g] * scales[g]) / scales[g])
        intweight = np.clip(intweight, 0, 15).astype(np.uint32)
        qweight = np.zeros((K, N // 8), dtype=np.uint32)
        qzeros = np.zeros((G, N // 8), dtype=np.uint32)
        for col in range(N // 8):
            for i in range(8):
                qweight[:, col] |= intweight[:, col * 8 + order_map[i]] << np.uint32(i * 4)
                qzeros[:, col] |= zeros[:, col * 8 + order_map[i]].astype(np.uint32) << np.uint32(
                    i * 4
                )
        out[name + ".qweight"] = torch.from_numpy(qweight.view(np.int32).copy())
        out[name + ".qzeros"] = torch.from_numpy(qzeros.view(np.int32).copy())
        out[name + ".scales"] = torch.from_numpy(scales.astype(np.float16))
        group = np.arange(K) // group_size
        deq = (intweight.astype(np.int64) - zeros[group]) * scales[group]  # [K, N]
        dense[name] = torch.from_numpy(deq.T.astype(np.float32).copy())
    out.update(tensors)
    config = {
        "quant_method": "awq",
        "bits": 4,
        "group_size": group_size,
        "zero_point": True,
        "version": "gemm",
        "modules_to_not_convert": None,
    }
    _finish(src, dst, out, config)
    return dense


def write_fp8(
    src: Path, dst: Path, block: tuple[int, int] = (128, 128), head: bool = False
) -> dict[str, torch.Tensor]:
    tensors = _read(src)
    out: dict[str, torch.Tensor] = {}
    dense: dict[str, torch.Tensor] = {}
    bn, bk = block
    for name in _modules(tensors, head):
        w = tensors.pop(name + ".weight").float()
        N, K = w.shape
        q = torch.empty((N, K), dtype=torch.float8_e4m3fn)
        inv = torch.empty((-(-N // bn), -(-K // bk)), dtype=torch.float32)
        for i in range(inv.shape[0]):
            for j in range(inv.shape[1]):
                tile = w[i * bn : (i + 1) * bn, j * bk : (j + 1) * bk]
                amax = float(tile.abs().max())
                scale = 448.0 / amax if amax > 0 else 1.0
                q[i * bn : (i + 1) * bn, j * bk : (j + 1) * bk] = (
                    (tile * scale).clamp(-448, 448).to(torch.float8_e4m3fn)
                )
                inv[i, j] = 1.0 / scale
        out[name + ".weight"] = q
        out[name + ".weight_scale_inv"] = inv
        s = inv.repeat_interleave(bn, 0)[:N].repeat_interleave(bk, 1)[:, :K]
        dense[name] = q.float() * s
    out.update(tensors)
    config = {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": list(block),
        "modules_to_not_convert": [] if head else ["lm_head"],
    }
    _finish(src, dst, out, config, untie=head)
    return dense


def write_fp8_tensor(
    src: Path, dst: Path, naming: str = "autofp8", static: bool = False
) -> dict[str, torch.Tensor]:
    """Per-tensor FP8 as AutoFP8 (naming "autofp8") or transformers ("transformers") store
    it; the head stays dense (AutoFP8 always ignores it)."""
    tensors = _read(src)
    out: dict[str, torch.Tensor] = {}
    dense: dict[str, torch.Tensor] = {}
    autofp8 = naming == "autofp8"
    for i, name in enumerate(_modules(tensors, head=False)):
        w = tensors.pop(name + ".weight")  # in its stored dtype, as AutoFP8 quantizes it
        lo, hi = w.aminmax()
        amax = torch.maximum(lo.abs(), hi.abs()).clamp(min=1e-12)
        scale = torch.finfo(torch.float8_e4m3fn).max / amax
        q = (w * scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        inv = scale.float().reciprocal()  # 0-dim
        out[name + (".weight_scale" if autofp8 else ".weight_scale_inv")] = inv
        out[name + ".weight"] = q
        if static:  # a calibrated input scale: any positive value serves the layout
            act = torch.tensor(0.01 * (1 + i % 5), dtype=torch.float32)
            out[name + (".input_scale" if autofp8 else ".activation_scale")] = act
        dense[name] = q.float() * inv
    out.update(tensors)
    scheme = "static" if static else "dynamic"
    if autofp8:
        config: dict[str, Any] = {
            "quant_method": "fp8", "activation_scheme": scheme, "ignored_layers": ["lm_head"]
        }  # fmt: skip
    else:
        config = {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": scheme,
            "weight_block_size": None,
            "modules_to_not_convert": ["lm_head"],
        }
    _finish(src, dst, out, config)
    return dense


def _finish(
    src: Path, dst: Path, tensors: dict[str, torch.Tensor], qconfig: dict[str, Any], untie=False
) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = qconfig
    if untie and config.get("tie_word_embeddings"):
        config["tie_word_embeddings"] = False  # the head quantized on its own
    if (
        untie
        and "lm_head.weight" not in tensors
        and not any(k.startswith("lm_head.") for k in tensors)
    ):
        raise ValueError("no head to quantize")
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    for f in src.iterdir():
        if f.is_file() and f.suffix != ".safetensors" and f.name != "config.json":
            shutil.copy(f, dst / f.name)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(dst / "model.safetensors"),
              metadata={"format": "pt"})  # fmt: skip
