"""A quantized checkpoint dequantized straight from its published tensors, for `verify`'s
transformers reference: a second path to the same dense weights that shares no code with
the loader's repacking (convert.py, packed.py).

    with dense_copy(model_dir) as ref_dir: ...   # a float32 dense checkpoint of the same
                                                 # weights, in a temporary directory

Each module is dequantized in its published orientation, indexing scales and zero points by
`g_idx` column by column (GPTQ), by the AWQ nibble order (AWQ), by each value's bit position
in its row (compressed-tensors), or by repeating block scales (FP8), as the publishers' own
torch fallbacks do; the result is written as `P.weight`
float32 [N, K], with every other tensor copied, and config.json without its
`quantization_config` (tying as the quantized config says). transformers then runs the model
as it would any dense checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from evokernel.model.checkpoint import SINGLE_FILE, inspect_checkpoint
from evokernel.model.config import ModelConfig, read_json_object
from evokernel.model.quant.config import CT_WHOLE
from evokernel.model.quant.layout import all_modules, fp8_scale_name
from evokernel.model.safetensors_io import TensorMap, TensorSpec, write_file

AWQ_NIBBLE_OF_COLUMN = (0, 4, 1, 5, 2, 6, 3, 7)  # column j of a word sits in nibble [j]
CT_INTS = ("ct-int", "ct-int8")


def gptq_dense(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor | None,
    bits: int,
    group_size: int,
    zero_offset: int,
) -> torch.Tensor:
    """[N, K] float32 from GPTQ's qweight [K/p, N], qzeros [G, N/p], scales [G, N]."""
    per, mask = 32 // bits, (1 << bits) - 1
    K = qweight.shape[0] * per
    rows = torch.arange(K, device=qweight.device)
    words = qweight[rows // per].to(torch.int64)  # [K, N]: the word holding each column
    q = (words >> ((rows % per) * bits).unsqueeze(1)) & mask
    cols = torch.arange(qzeros.shape[1] * per, device=qzeros.device)
    zwords = qzeros[:, cols // per].to(torch.int64)  # [G, N]
    z = ((zwords >> ((cols % per) * bits)) & mask) + zero_offset
    group = g_idx.long() if g_idx is not None else rows // (K if group_size == -1 else group_size)
    w = (q - z[group]).double() * scales.double()[group]  # [K, N]
    return w.t().float().contiguous()


def awq_dense(
    qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, group_size: int
) -> torch.Tensor:
    """[N, K] float32 from AWQ's qweight [K, N/8], qzeros [G, N/8], scales [G, N]."""
    N = qweight.shape[1] * 8
    cols = torch.arange(N, device=qweight.device)
    nibble = torch.tensor(AWQ_NIBBLE_OF_COLUMN, device=qweight.device)[cols % 8]
    q = (qweight[:, cols // 8].to(torch.int64) >> (4 * nibble)) & 0xF  # [K, N]
    z = (qzeros[:, cols // 8].to(torch.int64) >> (4 * nibble)) & 0xF  # [G, N]
    group = torch.arange(q.shape[0], device=q.device) // group_size
    return ((q - z[group]).double() * scales.double()[group]).t().float().contiguous()


def fp8_dense(
    weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int]
) -> torch.Tensor:
    N, K = weight.shape
    rows = torch.arange(N, device=weight.device) // block[0]
    cols = torch.arange(K, device=weight.device) // block[1]
    return weight.float() * scale_inv.float()[rows][:, cols]


def ct_int_dense(
    packed: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    g_idx: torch.Tensor | None,
    bits: int,
    group_size: int,
) -> torch.Tensor:
    """[N, K] float32 from compressed-tensors' weight_packed [N, ceil(K * bits / 32)] (value i
    of a row at bit i * bits of the row's bit string, plus 2**(bits-1)), weight_scale [N, G]
    and weight_zero_point [ceil(N * bits / 32), G] (the same packing down each column)."""

    def values(words: torch.Tensor, count: int) -> torch.Tensor:  # [R, W] -> [R, count]
        start = torch.arange(count, device=words.device) * bits
        word = words.to(torch.int64)[:, start // 32] & 0xFFFFFFFF
        return ((word >> (start % 32)) & ((1 << bits) - 1)) - (1 << (bits - 1))

    N = scale.shape[0]
    K = packed.shape[1] * 32 // bits
    q = values(packed, K)  # signed
    z = values(zero_point.t(), N).t() if zero_point is not None else torch.zeros_like(scale)
    group = (
        g_idx.long()
        if g_idx is not None
        else torch.arange(K, device=q.device) // (K if group_size == -1 else group_size)
    )
    return ((q - z.long()[:, group]).double() * scale.double()[:, group]).float()


def ct_int8_dense(
    weight: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None, group_size: int
) -> torch.Tensor:
    """[N, K] float32 from compressed-tensors' int-quantized int8 weight [N, K], weight_scale
    [N, G] and int8 weight_zero_point [N, G]: each group's scale (and zero) repeated over its
    `group_size` columns (-1: all; the last group cut short)."""
    K = weight.shape[1]
    gs = K if group_size == -1 else group_size

    def per_column(t: torch.Tensor) -> torch.Tensor:
        return t.double().repeat_interleave(gs, 1)[:, :K]

    zero = per_column(zero_point) if zero_point is not None else 0.0
    return ((weight.double() - zero) * per_column(scale)).float()


def ct_fp8_dense(weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """[N, K] float32 from compressed-tensors' FP8 weight and its scale per row ([N, 1]), per
    module ([1]) or per block ([ceil(N / bn), ceil(K / bk)]), broadcast."""
    N, K = weight.shape
    s = scale.float().reshape(1, 1) if scale.dim() == 1 else scale.float()
    if block[0] and block[1]:
        s = s.repeat_interleave(block[0], 0)[:N].repeat_interleave(block[1], 1)[:, :K]
    return weight.float() * s


@contextlib.contextmanager
def dense_copy(model_dir: str | Path) -> Iterator[Path]:
    """A temporary float32 dense checkpoint of the quantized one in `model_dir`."""
    with tempfile.TemporaryDirectory(prefix="evokernel-dequantized-") as tmp:
        yield write_dense_copy(model_dir, Path(tmp))


def write_dense_copy(model_dir: str | Path, out: Path) -> Path:
    src = Path(model_dir)
    cfg = ModelConfig.from_dir(src)
    q = cfg.quantization
    assert q is not None, "not a quantized checkpoint"
    ckpt = inspect_checkpoint(src, cfg)
    maps: dict[int, TensorMap] = {}

    def read(name: str) -> torch.Tensor:
        header, _ = ckpt.tensors[name]
        tmap = maps.setdefault(id(header), TensorMap(header))
        return tmap.view(name).clone()

    modules = {m.prefix: m for m in all_modules(cfg) if m.spec is not None}
    names: list[str] = []
    for name in ckpt.tensors:
        prefix, _, suffix = name.rpartition(".")
        if prefix in modules and suffix != "bias":  # a quantized module's bias is dense
            if f"{prefix}.weight" not in names:
                names.append(f"{prefix}.weight")
        else:
            names.append(name)

    def produce(spec: TensorSpec) -> torch.Tensor:
        prefix, _, suffix = spec.name.rpartition(".")
        m = modules.get(prefix)
        if m is None or suffix == "bias":
            return read(spec.name).float()
        s = m.spec
        assert s is not None
        if s.method == "fp8" and s.block == (CT_WHOLE, CT_WHOLE):  # one scale a module
            scale = read(fp8_scale_name(prefix, ckpt.tensors))
            return ct_fp8_dense(read(f"{prefix}.weight"), scale, s.block)
        if s.method == "fp8":
            return fp8_dense(read(f"{prefix}.weight"), read(f"{prefix}.weight_scale_inv"), s.block)
        if s.method == "ct-fp8":
            return ct_fp8_dense(read(f"{prefix}.weight"), read(f"{prefix}.weight_scale"), s.block)
        # compressed-tensors' zero points: stored only for asymmetric weights
        zp = read(f"{prefix}.weight_zero_point") if s.method in CT_INTS and not s.sym else None
        if s.method == "ct-int8":
            w, sc = read(f"{prefix}.weight"), read(f"{prefix}.weight_scale")
            return ct_int8_dense(w, sc, zp, s.group_size)
        if s.method == "ct-int":
            g = read(f"{prefix}.weight_g_idx") if s.desc_act else None
            return ct_int_dense(
                read(f"{prefix}.weight_packed"), read(f"{prefix}.weight_scale"), zp, g, s.bits,
                s.group_size,
            )  # fmt: skip
        qw, qz, sc = (read(f"{prefix}.{k}") for k in ("qweight", "qzeros", "scales"))
        if s.method == "awq":
            return awq_dense(qw, qz, sc, m.cols if s.group_size == -1 else s.group_size)
        g = read(f"{prefix}.g_idx") if f"{prefix}.g_idx" in ckpt.tensors else None
        return gptq_dense(qw, qz, sc, g, s.bits, s.group_size, s.zero_offset)

    def shape(name: str) -> tuple[int, ...]:
        prefix, _, suffix = name.rpartition(".")
        m = modules.get(prefix)
        if m is not None and suffix == "weight":
            return (m.rows, m.cols)
        return tuple(ckpt.tensors[name][1].shape)

    shapes = {n: shape(n) for n in names}
    specs = [TensorSpec(n, torch.float32, tuple(shapes[n])) for n in names]
    try:
        write_file(out / SINGLE_FILE, specs, produce)
    finally:
        for tmap in maps.values():
            tmap.close()
    raw = read_json_object(src / "config.json")
    raw.pop("quantization_config")
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    for path in src.iterdir():
        if path.is_file() and path.suffix == ".json" and path.name not in (
            "config.json", "model.safetensors.index.json"
        ):  # fmt: skip
            (out / path.name).write_bytes(path.read_bytes())
    return out
