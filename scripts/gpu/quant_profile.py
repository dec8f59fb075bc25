"""One quantized decode op of Qwen3-0.6B (or --shape), launched a few times without a graph, for
a profiler.

    ncu --kernel-name regex:quant_ --launch-skip 3 --launch-count 1 --section WarpStateStats \
        python3 scripts/gpu/quant_profile.py int4:o_proj [--dequant convert|magic|early] [--rows 8]

FMT:PROJ as bench/quant_kernels.py names them (formats fp8, int8, int4, ...; projections
qkv, o_proj, gate_up, down, head). Each launch reads its own copy of the weight (four
copies), so L2 holds none of them, as in a decode step. --rows: the batch (bf16 from 3 rows
on: the tensor-core rows kernel, kernels/rows.py); --cuda-rows N: bf16 from N rows on the CUDA
rows kernel (ops/rows_cuda.py; kernel name rows_mma). Needs CUDA.
"""

from __future__ import annotations

import argparse
import sys

import torch


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("spec", help="FMT:PROJ, e.g. int4:o_proj")
    p.add_argument("--dequant", default=None)
    p.add_argument("--launches", type=int, default=6)
    p.add_argument("--rows", type=int, default=1)
    p.add_argument("--shape", default="qwen3-0.6b", help="bench/quant_kernels.py SHAPES")
    p.add_argument("--cuda-rows", type=int, default=0, help="DecodeTuning.cuda_rows_min")
    args = p.parse_args()
    from evokernel.bench import quant_kernels as qk
    from evokernel.ops import quant
    from evokernel.ops.decode import DEFAULT
    from evokernel.ops.registry import pdl_supported

    if args.dequant:
        quant.DEQUANT = args.dequant
    fmt, proj = args.spec.split(":")
    N, K = qk.projection_shape(args.shape, proj)
    weights = [qk.make_weight(fmt, N, K) for _ in range(4)]
    tuning = DEFAULT._replace(pdl=pdl_supported(), cuda_rows_min=args.cuda_rows)
    op = qk.make_op(proj, fmt, tuning, args.rows, N, K)
    for i in range(args.launches):
        op(weights[i % len(weights)])
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
