"""Every engine kernel compiles for an H100 (sm_90) in bfloat16, float16 and float32, and the
fused decode kernels at Qwen3-0.6B's shapes keep their tiles in registers (no local memory).

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
    import os, re, subprocess, tempfile
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from evokernel.kernels.activation import silu_mul_kernel
    from evokernel.kernels.attention import attention_combine_kernel, attention_kernel
    from evokernel.kernels.embedding import embed_kernel
    from evokernel.kernels.gemv import (argmax_finish_kernel, gemv_add_kernel,
        norm_gate_up_kernel, norm_gemv_kernel, norm_head_kernel)
    from evokernel.kernels.norm import add_rms_norm_kernel, rms_norm_kernel
    from evokernel.kernels.rope import qk_norm_rope_append_kernel
    from evokernel.kernels.rows import (rows_gemv_kernel, rows_norm_kernel, rows_stream_kernel,
        rows_whole_k_kernel)
    from evokernel.ops import layer
    from evokernel.ops.tuning import DEFAULT

    CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")

    def compile_one(fn, args, consts, num_warps, aligned=()):
        # `aligned`: pointer/stride arguments Triton's launcher would specialise as
        # divisible by 16 (it does for every such value at run time): loads vectorise.
        sig = dict(args, **{k: "constexpr" for k in consts})
        names = list(sig)
        attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in aligned}
        src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
        target = GPUTarget("cuda", 90, 32)
        out = triton.compile(src, target=target, options={"num_warps": num_warps})
        assert "cubin" in out.asm, fn.__name__
        return out

    def no_spills(out, what):
        # Spilled registers (local memory) would put the decode kernels' weight tiles
        # through memory a second time.
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(out.asm["cubin"])
            f.flush()
            usage = subprocess.run([CUOBJDUMP, "--dump-resource-usage", f.name],
                                   capture_output=True, text=True).stdout
        m = re.search(r"REG:(\\d+) STACK:(\\d+) SHARED:\\d+ LOCAL:(\\d+)", usage)
        assert m, usage
        assert m.group(3) == "0", f"{what}: local memory {m.group(0)}"
        print(what, m.group(0))

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
                {"D": 128, "BLOCK_H": heads, "BLOCK_HALF": 64, "QK_NORM": heads == 32}, warps)

    # The fused decode kernels at Qwen3-0.6B's shapes in bf16 with PDL on, as
    # ops/decode.py launches them with the default tuning on a 132-SM GPU.
    p = "*bf16"
    gemv = {"x_ptr": p, "norm_ptr": p, "w_ptr": p, "bias_ptr": p, "y_ptr": p, "M": "i32",
            "N": "i32", "stride_x": "i32", "stride_w": "i32", "stride_y": "i32", "eps": "fp32"}
    flags = {"PDL": True}
    ptrs = ("x_ptr", "w_ptr", "stride_x", "stride_w")
    for rows, block_n, bias in ((1, 16, False), (8, 16, False), (1, 16, True)):
        out = compile_one(norm_gemv_kernel, gemv, {"K": 1024, "BLOCK_M": rows,
            "BLOCK_N": block_n, "BLOCK_K": 1024, "NORM": True, "HAS_BIAS": bias, **flags}, 8,
            ptrs)
        no_spills(out, f"norm_gemv qkv M={rows} bias={bias}")
    add = {"x_ptr": p, "w_ptr": p, "res_ptr": p, "M": "i32", "N": "i32", "stride_x": "i32",
           "stride_w": "i32", "stride_res": "i32"}
    for k, block_k in ((2048, 2048), (3072, 4096)):
        out = compile_one(gemv_add_kernel, add, {"K": k, "BLOCK_M": 1, "BLOCK_N": 8,
            "BLOCK_K": block_k, **flags}, 8, ptrs)
        no_spills(out, f"gemv_add K={k}")
    gate_up = {"x_ptr": p, "norm_ptr": p, "w_ptr": p, "act_ptr": p, "M": "i32", "INTER": "i32",
               "stride_x": "i32", "stride_w": "i32", "stride_act": "i32", "eps": "fp32"}
    out = compile_one(norm_gate_up_kernel, gate_up, {"K": 1024, "BLOCK_M": 1, "BLOCK_N": 8,
        "BLOCK_K": 1024, **flags}, 8, ptrs)
    no_spills(out, "norm_gate_up")
    head = {"x_ptr": p, "norm_ptr": p, "w_ptr": p, "key_ptr": "*i64", "logits_ptr": "*fp32",
            "M": "i32", "V": "i32", "stride_x": "i32", "stride_w": "i32",
            "stride_logits": "i32", "eps": "fp32"}
    for logits in (False, True):
        out = compile_one(norm_head_kernel, head, {"K": 1024, "BLOCK_M": 1, "BLOCK_N": 16,
            "BLOCK_K": 1024, "WRITE_LOGITS": logits, "ARGMAX": not logits, "PDL": True}, 8,
            ptrs)
        no_spills(out, f"norm_head logits={logits}")
    # The batched rows kernel (tensor cores), every epilogue, split or whole K.
    rows_args = {"x_ptr": p, "norm_ptr": p, "w_ptr": p, "bias_ptr": p, "out_ptr": p,
                 "res_ptr": p, "key_ptr": "*i64", "part_ptr": "*fp32", "ticket_ptr": "*i32",
                 "M": "i32", "N": "i32", "stride_x": "i32",
                 "stride_w": "i32", "stride_out": "i32", "stride_res": "i32", "eps": "fp32"}
    # (epilogue, K, BLOCK_N, BLOCK_K, warps, norm, swap) as ops/layer.py picks them at
    # Qwen3-0.6B's shapes on 132 SMs (16 columns of the whole K where they fill the SMs, else
    # K split; with rows_swap 64 columns over 4 warps; the head's norm a launch of its own)
    for epilogue, k, block_n, block_k, warps, norm, swap in (
        (0, 1024, 16, 1024, 4, True, False), (1, 2048, 16, 512, 4, False, False),
        (1, 3072, 16, 1024, 4, False, False), (2, 1024, 16, 1024, 4, True, False),
        (3, 1024, 32, 1024, 4, False, False), (0, 1024, 16, 512, 4, True, False),
        (2, 1024, 16, 512, 4, True, False), (0, 1024, 64, 256, 4, False, True),
        (2, 1024, 64, 128, 4, True, True), (1, 3072, 64, 256, 4, False, True),
        (3, 1024, 64, 256, 4, False, True),
    ):
        args = dict(rows_args, out_ptr="*fp32") if epilogue == 3 else rows_args
        split = -(-k // block_k)
        out = compile_one(rows_gemv_kernel, args, {"K": k, "BLOCK_M": 16,
            "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT": split,
            "NORM": norm, "HAS_BIAS": epilogue == 0,
            "EPILOGUE": epilogue, "WRITE_LOGITS": epilogue == 3, "ARGMAX": epilogue == 3,
            "IEEE": False, "SWAP": swap, "PDL": True}, warps, ptrs)
        no_spills(out, f"rows epilogue={epilogue} K={k} BLOCK_K={block_k} split={split} "
                       f"swap={swap}")
    # The whole-K rows kernel as ops/layer.py picks it at up to 8 rows (qkv, o_proj, gate_up,
    # the head), and with parts of 64 and 256.
    layer.shared_limit = lambda device: 232448
    whole_args = {n: v for n, v in rows_args.items() if n not in ("part_ptr", "ticket_ptr")}
    for epilogue, n, k, part_k in ((0, 4096, 1024, 128), (1, 1024, 2048, 128),
                                   (2, 3072, 1024, 128), (3, 151936, 1024, 128),
                                   (0, 4096, 1024, 64), (1, 1024, 2048, 256)):
        tiles = 2 if epilogue == 2 else 1
        t = DEFAULT._replace(rows_part_k=part_k)
        bm, bn, parts, kw, warps = layer.rows_whole_k_blocks(8, k, 2, None, t, tiles)
        args = dict(whole_args, out_ptr="*fp32") if epilogue == 3 else whole_args
        out = compile_one(rows_whole_k_kernel, args, {"K": k, "BLOCK_M": bm, "BLOCK_N": bn,
            "PARTS": parts, "KW": kw, "NORM": False, "HAS_BIAS": epilogue == 0,
            "EPILOGUE": epilogue, "WRITE_LOGITS": False, "ARGMAX": epilogue == 3,
            "IEEE": False, "PDL": True}, warps, ptrs)
        no_spills(out, f"rows_whole_k epilogue={epilogue} K={k} parts={parts}")
    # The streaming rows kernel as ops/layer.py picks it at 8 and 32 rows on 132 SMs (every
    # projection, the norm launched apart or in the program), within an SM's shared memory.
    layer.sm_count = lambda device: 132
    for epilogue, n, k, rows, norm in ((0, 4096, 1024, 32, True), (1, 1024, 2048, 32, False),
                                       (2, 3072, 1024, 32, False), (1, 1024, 3072, 8, False),
                                       (1, 1024, 3072, 32, False),
                                       (3, 151936, 1024, 32, False), (2, 3072, 1024, 64, True)):
        tiles = 2 if epilogue == 2 else 1
        bm, bn, bk, k_per, split, stages, prefetch, warps = layer.rows_stream_blocks(
            rows, n, k, 2, None, DEFAULT, tiles)
        args = dict(rows_args, out_ptr="*fp32") if epilogue == 3 else rows_args
        out = compile_one(rows_stream_kernel, args, {"K": k, "BLOCK_M": bm, "BLOCK_N": bn,
            "BLOCK_K": bk, "K_PER": k_per, "SPLIT": split, "STAGES": stages,
            "PREFETCH": prefetch, "NORM_K": max(16, min(k, 8192 // bm)), "NORM": norm,
            "HAS_BIAS": epilogue == 0,
            "EPILOGUE": epilogue, "WRITE_LOGITS": False, "ARGMAX": epilogue == 3,
            "IEEE": False, "PDL": True}, warps, ptrs)
        no_spills(out, f"rows_stream epilogue={epilogue} K={k} rows={rows} split={split}")
        assert out.metadata.shared <= 232448, (epilogue, rows, out.metadata.shared)
    out = compile_one(rows_norm_kernel, {"x_ptr": p, "w_ptr": p, "out_ptr": p,
        "stride_x": "i32", "stride_out": "i32", "eps": "fp32"},
        {"K": 1024, "BLOCK_K": 1024, "PDL": True}, 4)
    no_spills(out, "rows_norm")
    out = compile_one(argmax_finish_kernel, {"key_ptr": "*i64", "token_ptr": "*i64",
        "pos_ptr": "*i32", "seq_lens_ptr": "*i32", "M": "i32"},
        {"BLOCK_M": 1, "ADVANCE": True, "PDL": True}, 1)
    no_spills(out, "argmax_finish")
    for dt in ("*bf16", "*fp16", "*fp32"):
        compile_one(embed_kernel, {"ids_ptr": "*i64", "w_ptr": dt, "out_ptr": dt, "V": "i32",
            "H": "i32", "stride_w": "i32", "stride_out": "i32"},
            {"BLOCK_H": 1024, "PDL": True}, 4, ("w_ptr", "out_ptr", "stride_w", "stride_out"))
    attn = {"q_ptr": p, "q_norm_ptr": p, "k_norm_ptr": p, "cos_ptr": "*fp32",
            "sin_ptr": "*fp32", "pos_ptr": "*i32", "seq_lens_ptr": "*i32", "k_ptr": p,
            "v_ptr": p, "out_ptr": p, "part_ptr": "*fp32", "lse_ptr": "*fp32",
            "ticket_ptr": "*i32", "scale": "fp32",
            "eps": "fp32", "SPLIT": "i32", "Hkv": "i32", "S": "i32", "P": "i32",
            "stride_qb": "i32", "stride_qh": "i32",
            "stride_kb": "i32", "stride_kh": "i32", "stride_ks": "i32", "stride_vb": "i32",
            "stride_vh": "i32", "stride_vs": "i32", "stride_ob": "i32", "stride_oh": "i32"}
    for fused, direct, ticket, mma in ((True, True, False, True), (True, False, False, True),
                                       (True, False, True, True), (False, False, True, True),
                                       (True, False, False, False)):
        out = compile_one(attention_kernel, attn, {"GROUP": 2, "D": 128,
            "BLOCK_G": 16 if mma else 2, "BLOCK_N": 64 if mma else 16, "FUSED": fused,
            "QK_NORM": fused and mma, "DIRECT": direct, "TICKET": ticket, "BLOCK_S": 32,
            "BLOCK_R": 2, "IEEE": False, "MMA": mma, **flags}, 4,
            ("q_ptr", "k_ptr", "v_ptr", "stride_ks", "stride_vs"))
        no_spills(out, f"attention fused={fused} direct={direct} ticket={ticket} mma={mma}")
    compile_one(attention_combine_kernel, {"part_ptr": "*fp32", "lse_ptr": "*fp32",
        "out_ptr": p, "Hq": "i32", "SPLIT": "i32", "stride_ob": "i32", "stride_oh": "i32"},
        {"D": 128, "BLOCK_S": 32, "PDL": True}, 1)
    # The sync-cost probes (bench/sync_costs.py), the persistent barrier's spin loop included.
    from evokernel.kernels.sync_probes import (atomic_add_kernel, barrier_kernel,
        chain_kernel, store_rows_kernel)
    f32 = "*fp32"
    compile_one(chain_kernel, {"src_ptr": f32, "dst_ptr": f32, "N": "i32"},
        {"BLOCK": 8, "BLOCK_N": 1024, "PDL": True}, 4)
    compile_one(barrier_kernel, {"a_ptr": f32, "b_ptr": f32, "counter_ptr": "*i32", "N": "i32",
        "STAGES": "i32"}, {"BLOCK": 8, "BLOCK_N": 1024}, 4)
    compile_one(atomic_add_kernel, {"acc_ptr": f32, "N": "i32"}, {"BLOCK_N": 1024}, 4)
    compile_one(store_rows_kernel, {"out_ptr": f32, "N": "i32"}, {"BLOCK_N": 1024}, 4)
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
