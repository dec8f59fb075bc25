"""Ahead-of-time compile of the seed candidates' kernels for an H100 (sm_90), no GPU needed.

The interpreter never compiles a kernel, so what only the compiler sees (types of loop-carried
values, layouts, shared memory beyond the 227 KB an H100 block may use) would first show on
the GPU. `python tests/tasks/seed_compile.py [--all]` compiles the knob combinations given
(default: the resource corners; --all: every declared combination) and prints one line per
kernel. It must run without TRITON_INTERPRET.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import tempfile
from pathlib import Path
from typing import Any

import triton
from task_checks import knob_axes, knob_corners, knob_space
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from evokernel.tasks import get_task
from evokernel.tasks.blocks import set_knobs

H100_SHARED = 232_448  # bytes of shared memory one block may use on sm_90
TARGET = GPUTarget("cuda", 90, 32)
_DIR = Path(tempfile.mkdtemp(prefix="seed_compile_"))
_done: dict[str, int] = {}  # compile key -> shared bytes: knob combinations share kernels


def _load(task_name: str, knobs: dict[str, Any]):
    source = set_knobs(get_task(task_name).seed_candidate.read_text(), knobs)
    digest = hashlib.sha256(repr(sorted(knobs.items())).encode()).hexdigest()[:16]
    name = f"seed_{task_name.split('@')[0]}_{digest}"
    path = _DIR / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(fn, sig: dict[str, str], consts: dict[str, Any], warps: int, stages: int) -> int:
    """Compile with every pointer and stride 16-divisible (as real launches are); returns the
    shared memory the kernel needs."""
    key = f"{fn.__name__} {sig} {consts} {warps} {stages}"
    if key in _done:
        return _done[key]
    aligned = [n for n, t in sig.items() if t.startswith("*") or n.startswith("stride")]
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = ASTSource(fn, dict(sig, **dict.fromkeys(consts, "constexpr")), consts, attrs)
    out = triton.compile(src, target=TARGET, options={"num_warps": warps, "num_stages": stages})
    assert "cubin" in out.asm, fn.__name__
    shared = int(out.metadata.shared)
    assert shared <= H100_SHARED, f"{fn.__name__} {consts}: {shared} B of shared memory"
    _done[key] = shared
    return shared


def compile_attention(knobs: dict[str, Any], dtype: str, shapes: bool) -> list[str]:
    """`shapes`: also a 5:1 group with D=64 (else Qwen3's 2:1, D=128 only)."""
    m = _load("gqa_decode_attention", knobs)
    p = "*" + dtype
    strides = ["qb", "qh", "kb", "kh", "ks", "vb", "vh", "vs", "ob", "oh"]
    sig = {"q_ptr": p, "k_ptr": p, "v_ptr": p, "seq_lens_ptr": "*i32", "out_ptr": p}
    sig |= {"part_ptr": "*fp32", "lse_ptr": "*fp32", "scale": "fp32", "SPLIT": "i32"}
    sig |= {"Hkv": "i32"} | {f"stride_{s}": "i32" for s in strides}
    lines = []
    for group, d in ((2, 128), (5, 64))[: 2 if shapes else 1]:
        for direct in (True, False):
            consts = {"GROUP": group, "D": d, "BLOCK_G": 16, "BLOCK_N": m.BLOCK_N}
            consts |= {"DIRECT": direct, "IEEE": dtype == "fp32"}
            shared = _compile(m._attend, sig, consts, m.NUM_WARPS, 1)
            lines.append(f"_attend {dtype} {consts} warps={m.NUM_WARPS}: {shared} B shared")
    csig = {"part_ptr": "*fp32", "lse_ptr": "*fp32", "out_ptr": p, "Hq": "i32", "SPLIT": "i32"}
    csig |= {"stride_ob": "i32", "stride_oh": "i32"}
    consts = {"D": 128, "BLOCK_S": 64}
    shared = _compile(m._combine, csig, consts, 4, 1)
    lines.append(f"_combine {dtype} {consts}: {shared} B shared")
    return lines


def compile_linear(knobs: dict[str, Any], dtype: str, shapes: bool) -> list[str]:
    m = _load("decode_linear", knobs)
    p = "*" + dtype
    y = "*fp32" if m.SPLIT_K > 1 else p
    sig = {"x_ptr": p, "w_ptr": p, "y_ptr": y, "M": "i32", "N": "i32", "K": "i32"}
    sig |= {"k_per_split": "i32", "stride_xm": "i32", "stride_wn": "i32"}
    sig |= {"stride_ym": "i32", "stride_ys": "i32"}
    consts = {"IEEE": dtype == "fp32", "BLOCK_M": m.BLOCK_M, "BLOCK_N": m.BLOCK_N}
    consts["BLOCK_K"] = m.BLOCK_K
    shared = _compile(m._linear_tile, sig, consts, m.NUM_WARPS, m.NUM_STAGES)
    lines = [f"_linear_tile {dtype} {consts} warps={m.NUM_WARPS}: {shared} B shared"]
    if m.SPLIT_K > 1:
        rsig = {"part_ptr": "*fp32", "y_ptr": p, "MN": "i32"}
        consts = {"SPLIT_K": m.SPLIT_K, "BLOCK": 1024}
        shared = _compile(m._splitk_reduce, rsig, consts, 4, 1)
        lines.append(f"_splitk_reduce {dtype} {consts}: {shared} B shared")
    return lines


def compile_layer(knobs: dict[str, Any], dtype: str, shapes: bool) -> list[str]:
    """The decode-layer seed's kernels at Qwen3-0.6B's shapes (`shapes`: also a 5:1 group with
    D=64 and a 4096-wide model), one row and a batch of 8, launched as its launchers would on
    a 132-SM GPU."""
    m = _load("decode_layer", knobs)
    m.sm_count = lambda device: 132
    m.shared_limit = lambda device: H100_SHARED
    t = m._tuning()
    p = "*" + dtype
    pdl = bool(t.pdl)
    lines = []
    for H, hq, hkv, D, inter in ((1024, 16, 8, 128, 3072), (4096, 10, 2, 64, 12288))[
        : 2 if shapes else 1
    ]:
        n_qkv = (hq + 2 * hkv) * D
        gemv = {"x_ptr": p, "norm_ptr": p, "w_ptr": p, "bias_ptr": p, "y_ptr": p, "M": "i32"}
        gemv |= {"N": "i32", "stride_x": "i32", "stride_w": "i32", "stride_y": "i32"}
        gemv |= {"eps": "fp32"}
        add = {"x_ptr": p, "w_ptr": p, "res_ptr": p, "M": "i32", "N": "i32", "stride_x": "i32"}
        add |= {"stride_w": "i32", "stride_res": "i32"}
        gate = {"x_ptr": p, "norm_ptr": p, "w_ptr": p, "act_ptr": p, "M": "i32", "INTER": "i32"}
        gate |= {"stride_x": "i32", "stride_w": "i32", "stride_act": "i32", "eps": "fp32"}
        launches = [  # (kernel, signature, N, K, tiles, extra constants)
            (m.norm_gemv_kernel, gemv, n_qkv, H, 1, {"NORM": True, "HAS_BIAS": False}),
            (m.gemv_add_kernel, add, H, hq * D, 1, {}),
            (m.gemv_add_kernel, add, H, inter, 1, {}),
            (m.norm_gate_up_kernel, gate, inter, H, 2, {}),
        ]
        for fn, sig, n, k, tiles, extra in launches:
            block_n, block_k = m.gemv_block_n(n, k, 2, None, t, tiles), m.next_pow2(k)
            consts = {"K": k, "BLOCK_M": 1, "BLOCK_N": block_n, "BLOCK_K": block_k, "PDL": pdl}
            warps = m.gemv_warps(tiles * block_n, block_k, t)
            shared = _compile(fn, sig, consts | extra, warps, 3)
            lines.append(f"{fn.__name__} {dtype} {consts} warps={warps}: {shared} B shared")
        rows = {"x_ptr": p, "norm_ptr": p, "w_ptr": p, "bias_ptr": p, "out_ptr": p}
        rows |= {"res_ptr": p, "key_ptr": "*i64", "part_ptr": "*fp32", "ticket_ptr": "*i32"}
        rows |= {"M": "i32", "N": "i32", "stride_x": "i32"}
        rows |= {"stride_w": "i32", "stride_out": "i32", "stride_res": "i32", "eps": "fp32"}
        whole_sig = {n: v for n, v in rows.items() if n not in ("part_ptr", "ticket_ptr")}
        size = {"bf16": 2, "fp16": 2, "fp32": 4}[dtype]
        for M in (8, 32):
            for epilogue, n, k in ((0, n_qkv, H), (1, H, hq * D), (2, inter, H), (1, H, inter)):
                tiles = 2 if epilogue == 2 else 1
                norm = epilogue != 1 and t.rows_prenorm != 2
                flags = {"NORM": norm, "HAS_BIAS": False, "EPILOGUE": epilogue}
                flags |= {"WRITE_LOGITS": False, "ARGMAX": False, "IEEE": dtype == "fp32"}
                whole = m.rows_whole_k_blocks(M, k, size, None, t, tiles)
                if whole is not None:
                    block_m, block_n, parts, kw, warps = whole
                    consts = {"K": k, "BLOCK_M": block_m, "BLOCK_N": block_n, "PARTS": parts}
                    consts |= {"KW": kw} | flags
                    kernel, sig = m.rows_whole_k_kernel, whole_sig
                    shared = _compile(kernel, sig, consts | {"PDL": pdl}, warps, 3)
                    lines.append(f"rows_whole_k_kernel {dtype} M={M} {consts}: {shared} B shared")
                    continue
                stream = m.rows_stream_blocks(M, n, k, size, None, t, tiles)
                if stream is not None:
                    block_m, block_n, block_k, k_per, split, stages, prefetch, warps = stream
                    consts = {"K": k, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k}
                    consts |= {"K_PER": k_per, "SPLIT": split, "STAGES": stages}
                    norm_k = max(16, min(_pow2(k), 8192 // block_m))  # as the launcher's
                    consts |= {"PREFETCH": prefetch, "NORM_K": norm_k} | flags
                    shared = _compile(m.rows_stream_kernel, rows, consts | {"PDL": pdl}, warps, 3)
                    lines.append(f"rows_stream_kernel {dtype} M={M} {consts}: {shared} B shared")
                    continue
                block_m, block_n, block_k, split, warps = m.rows_blocks(M, n, k, 2, None, t, tiles)
                consts = {"K": k, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k}
                consts |= {"SPLIT": split, "SWAP": bool(t.rows_swap)} | flags
                shared = _compile(m.rows_gemv_kernel, rows, consts | {"PDL": pdl}, warps, 3)
                lines.append(f"rows_gemv_kernel {dtype} M={M} {consts}: {shared} B shared")
        if t.rows_prenorm == 2:
            sig = {"x_ptr": p, "w_ptr": p, "out_ptr": p, "stride_x": "i32", "stride_out": "i32"}
            sig |= {"eps": "fp32"}
            consts = {"K": H, "BLOCK_K": _pow2(H), "PDL": pdl}
            shared = _compile(m.rows_norm_kernel, sig, consts, 4, 3)
            lines.append(f"rows_norm_kernel {dtype}: {shared} B shared")
        sig = {n: p for n in ("q_ptr", "q_norm_ptr", "k_norm_ptr")}
        sig |= {"cos_ptr": "*fp32", "sin_ptr": "*fp32", "pos_ptr": "*i32", "seq_lens_ptr": "*i32"}
        sig |= {"k_ptr": p, "v_ptr": p, "out_ptr": p, "part_ptr": "*fp32", "lse_ptr": "*fp32"}
        sig |= {"ticket_ptr": "*i32", "scale": "fp32", "eps": "fp32"}
        sig |= dict.fromkeys(["SPLIT", "Hkv", "S", "P", "stride_qb", "stride_qh"], "i32")
        sig |= dict.fromkeys(
            [f"stride_{s}" for s in ("kb", "kh", "ks", "vb", "vh", "vs", "ob", "oh")], "i32"
        )
        # The long-context launch (tensor-core products) and the first bucket's.
        group = hq // hkv
        for bound, direct in ((4096, True), (4096, False), (256, False)):
            mma = t.attention_mma(bound)
            consts = {"GROUP": group, "D": D, "BLOCK_G": 16 if mma else _pow2(group)}
            consts |= {"BLOCK_N": t.attention_block_n(bound), "FUSED": True, "QK_NORM": True}
            consts |= {"DIRECT": direct, "TICKET": bool(t.ticket_combine) and not direct}
            consts |= {"BLOCK_S": 64, "BLOCK_R": _pow2(group), "IEEE": dtype == "fp32"}
            consts |= {"MMA": mma, "PDL": pdl}
            warps = t.attention_warps(bound)
            shared = _compile(m.attention_kernel, sig, consts, warps, 3)
            lines.append(f"attention_kernel {dtype} {consts} warps={warps}: {shared} B shared")
        sig = {"part_ptr": "*fp32", "lse_ptr": "*fp32", "out_ptr": p, "Hq": "i32", "SPLIT": "i32"}
        sig |= {"stride_ob": "i32", "stride_oh": "i32"}
        consts = {"D": D, "BLOCK_S": 64, "PDL": pdl}
        shared = _compile(m.attention_combine_kernel, sig, consts, t.combine_warps, 3)
        lines.append(f"attention_combine_kernel {dtype}: {shared} B shared")
    return lines


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


COMPILERS = {
    "gqa_decode_attention": compile_attention,
    "decode_linear": compile_linear,
    "decode_layer": compile_layer,
}


# The layer's space is too large for corners or a product: each knob's values one at a time.
SPACES = {"decode_layer": (knob_axes, knob_axes)}


def run(full: bool) -> list[str]:
    """Corners in bfloat16 (quick), or every combination in bfloat16 and float16 on two shapes
    (the layer: each knob value in turn)."""
    lines = []
    for task_name, compile_fn in COMPILERS.items():
        quick, everything = SPACES.get(task_name, (knob_corners, knob_space))
        for knobs in (everything if full else quick)(task_name):
            for dtype in ("bf16", "fp16") if full else ("bf16",):
                lines += [f"{task_name} {line}" for line in compile_fn(knobs, dtype, full)]
    return lines


def main(argv: list[str]) -> int:
    for line in run("--all" in argv):
        print(line, flush=True)
    print("compiled")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
