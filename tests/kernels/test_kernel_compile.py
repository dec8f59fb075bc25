"""Every engine kernel compiles for an H100 (sm_90) in bfloat16, float16 and float32.

The interpreter runs kernels on the CPU but never compiles them, and cannot run bfloat16;
this ahead-of-time compile (Triton's own ptxas, no GPU needed) catches what only the compiler
sees. It runs in a subprocess because the test process has the interpreter switched on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from evokernel.kernels.activation import silu_mul_kernel
    from evokernel.kernels.norm import add_rms_norm_kernel, rms_norm_kernel
    from evokernel.kernels.rope import qk_norm_rope_append_kernel

    def compile_one(fn, args, consts, num_warps):
        sig = dict(args, **{k: "constexpr" for k in consts})
        src = ASTSource(fn=fn, signature=sig, constexprs=consts)
        target = GPUTarget("cuda", 90, 32)
        out = triton.compile(src, target=target, options={"num_warps": num_warps})
        assert "cubin" in out.asm, fn.__name__

    for dt in ("bf16", "fp16", "fp32"):
        p = "*" + dt
        compile_one(rms_norm_kernel, {"x_ptr": p, "w_ptr": p, "out_ptr": p, "stride_x": "i32",
            "stride_out": "i32", "H": "i32", "eps": "fp32"}, {"BLOCK_H": 1024}, 4)
        compile_one(add_rms_norm_kernel, {"x_ptr": p, "res_ptr": p, "w_ptr": p, "sum_ptr": p,
            "out_ptr": p, "stride_x": "i32", "stride_res": "i32", "stride_sum": "i32",
            "stride_out": "i32", "H": "i32", "eps": "fp32"}, {"BLOCK_H": 1024}, 4)
        compile_one(silu_mul_kernel, {"gu_ptr": p, "out_ptr": p, "stride_gu": "i32",
            "stride_out": "i32", "I": "i32"}, {"BLOCK": 1024}, 4)
        for heads, warps in ((32, 4), (64, 8)):
            compile_one(qk_norm_rope_append_kernel, {"qkv_ptr": p, "q_norm_ptr": p,
                "k_norm_ptr": p, "cos_ptr": "*fp32", "sin_ptr": "*fp32", "pos_ptr": "*i32",
                "q_out_ptr": p, "k_cache_ptr": p, "v_cache_ptr": p, "T": "i32", "Hq": "i32",
                "Hkv": "i32", "S": "i32", "P": "i32", "stride_qkv": "i32", "eps": "fp32"},
                {"D": 128, "BLOCK_H": heads, "BLOCK_HALF": 64}, warps)
    print("compiled")
    """
)


def test_kernels_compile_for_sm90() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    if "ptxas" in proc.stderr and "not found" in proc.stderr.lower():
        pytest.skip("Triton's ptxas is not available on this machine")
    assert proc.returncode == 0 and "compiled" in proc.stdout, proc.stderr[-3000:]
