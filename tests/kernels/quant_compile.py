"""Ahead-of-time sm_90 builds of the quantized decode kernels as ops/quant.py launches them
(default tuning, a 132-SM GPU, bf16 activations, PDL on), for every format and projection of
a model shape: each must build and keep its tile in registers (no local memory).

    python tests/kernels/quant_compile.py [qwen3-0.6b|qwen3-4b|qwen3-8b]   (no GPU needed)

Prints one line per build with its registers; exits 1 if any spills. Run without
TRITON_INTERPRET (the interpreter never compiles); tests/kernels/test_quant_kernel_compile.py
runs it in a subprocess.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from typing import Any

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from evokernel.bench import quant_kernels as qk
from evokernel.kernels import quant_gemv as kernels
from evokernel.ops import quant
from evokernel.ops.decode import DEFAULT

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
POINTER = {
    torch.float8_e4m3fn: "*fp8e4nv",
    torch.int32: "*i32",
    torch.float16: "*fp16",
    torch.float32: "*fp32",
    torch.uint8: "*u8",
}
STRIDES = {"stride_x": "i32", "stride_q": "i32", "stride_s": "i32", "stride_z": "i32"}


def build(fn: Any, args: dict[str, str], consts: dict[str, Any], warps: int) -> str:
    """Compile for sm_90; the resource line of its cubin (REG, STACK, SHARED, LOCAL)."""
    sig = dict(args, **{k: "constexpr" for k in consts})
    names = list(sig)
    aligned = ("x_ptr", "q_ptr", "stride_x", "stride_q")  # as the launcher specialises them
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in aligned}
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    out = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(out.asm["cubin"])
        f.flush()
        usage = subprocess.run(
            [CUOBJDUMP, "--dump-resource-usage", f.name], capture_output=True, text=True
        ).stdout
    m = re.search(r"REG:\d+ STACK:\d+ SHARED:\d+ LOCAL:\d+", usage)
    assert m, usage
    return m.group(0)


def one(shape: str, fmt: str, proj: str, perm: bool = False, bias: bool = False) -> str:
    N, K = qk.projection_shape(shape, proj)
    tiles = 2 if proj == "gate_up" else 1
    w = qk.make_weight(fmt, min(N, 4096), K, dev="cpu")  # the layout; N sets the launch
    if perm:
        w.perm = torch.randperm(K).to(torch.int32)
    op = {"qkv": "norm_linear", "gate_up": "gate_up", "head": "head"}.get(proj, "linear_residual")
    lay = quant.layout(w, op)
    tuning = DEFAULT
    if op == "head":
        tuning = DEFAULT._replace(tile_bytes=max(DEFAULT.tile_bytes, quant.HEAD_TILE_BYTES))
    bn = quant.block_n(N // tiles, lay, torch.device("cpu"), tuning, tiles)
    warps = quant._warps(bn, lay, tuning, tiles)
    ptrs = dict(zip(("q_ptr", "s_ptr", "z_ptr", "p_ptr"), (POINTER[t.dtype] for t in lay.tensors)))
    consts = dict(K=K, BLOCK_N=bn, PDL=True, **lay.meta)
    norm = {"x_ptr": "*bf16", "norm_ptr": "*bf16", **ptrs}
    if proj == "qkv":
        args = {**norm, "bias_ptr": "*bf16", "y_ptr": "*bf16", "M": "i32", "N": "i32",
                **STRIDES, "stride_y": "i32", "eps": "fp32"}  # fmt: skip
        consts |= {"NORM": True, "HAS_BIAS": bias}
        usage = build(kernels.quant_norm_gemv_kernel, args, consts, warps)
    elif proj in ("o_proj", "down"):
        args = {"x_ptr": "*bf16", **ptrs, "res_ptr": "*bf16", "M": "i32", "N": "i32",
                **STRIDES, "stride_res": "i32"}  # fmt: skip
        usage = build(kernels.quant_gemv_add_kernel, args, consts, warps)
    elif proj == "gate_up":
        args = {**norm, "act_ptr": "*bf16", "M": "i32", "I": "i32", **STRIDES,
                "stride_act": "i32", "eps": "fp32"}  # fmt: skip
        usage = build(kernels.quant_norm_gate_up_kernel, args, consts, warps)
    else:
        args = {**norm, "key_ptr": "*i64", "logits_ptr": "*fp32", "M": "i32", "V": "i32",
                **STRIDES, "stride_logits": "i32", "eps": "fp32"}  # fmt: skip
        consts |= {"WRITE_LOGITS": False, "ARGMAX": True}
        usage = build(kernels.quant_norm_head_kernel, args, consts, warps)
    extra = (" act-order" if perm else "") + (" bias" if bias else "")
    return f"{shape} {fmt:9s} {proj:8s}{extra} BLOCK_N={bn} warps={warps} {usage}"


def main() -> int:
    shape = sys.argv[1] if len(sys.argv) > 1 else "qwen3-0.6b"
    quant.sm_count = lambda device: 132  # an H100's SMs, as the launcher would see them
    lines = [one(shape, f, p) for f in ("fp8", "int8", "int4", "int4-asym") for p in qk.PROJECTIONS]
    lines += [one(shape, "int4-asym", "qkv", perm=True, bias=True)]
    print("\n".join(lines))
    spilled = [line for line in lines if not line.endswith("LOCAL:0")]
    return 1 if spilled else 0


if __name__ == "__main__":
    sys.exit(main())
