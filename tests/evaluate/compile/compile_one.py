"""`python compile_one.py KERNEL_FILE`: compile the file's `k` for an sm_90 target through
Triton's cache (whatever TRITON_CACHE_DIR / TRITON_CACHE_MANAGER / EVOKERNEL_SHARED_CACHE say)
and print one JSON line: the compile hash and the cubin's sha256. Needs no GPU."""

import hashlib
import importlib.util
import json
import sys

import triton
from triton.backends.compiler import GPUTarget

spec = importlib.util.spec_from_file_location("kernel_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
source = triton.compiler.ASTSource(
    fn=module.k,
    signature={"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
    constexprs={"BLOCK": 128},
)
compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32))
cubin = hashlib.sha256(compiled.asm["cubin"]).hexdigest()
print(json.dumps({"hash": compiled.hash, "cubin": cubin}))
