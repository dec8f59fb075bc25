"""Launcher of the persistent decode step: every decoder layer of a batch-1 step in one launch
(kernels/cuda/decode_persistent.cu).

    layers = PersistentLayers.build(cfg, weights, cache, cos, sin, tuning)  # None: cannot run
    h = layers(tokens, positions, seq_lens, bound)                  # [1, H], as _decode_layers

Same contract as the engine's per-layer decode (engine/decoder.py `_decode_layers`): the
embedding of `tokens`, then each layer's five fused ops, the new token's K/V appended at its
position in every layer's cache; `h` is the residual stream after the last layer, not
normalised. Where it applies (`why_not` says why not, in one line): a CUDA device of sm_90+
with nvcc, batch 1, dense bfloat16/float16 weights, head_dim 128, two query heads per kv head,
q/k norms, no biases, hidden, intermediate and Hq * head_dim multiples of 256, every
projection row at most one 16 KB ring slot, at most 64 rows a CTA a stage, and a stage's
chunks at most the ring's slots.

The grid is one CTA per SM and must be resident at once (the kernel's CTAs wait on each
other): nothing else may run beside it on the device (one engine a device, as the engine's
greedy heads already assume). `error()` reads the kernel's flag: a wait (for tagged words or
ring slots) of more than ~2 s raised it (a broken residency assumption), and that step's
output is garbage. Off unless `DecodeTuning.persistent_max` asks for it: on the GPUs measured
it is slower than the launched step (docs/perf-log.md, "A persistent decode step").
Attention work split: `split_for(bound)` chunks of the context per kv head, at least
`tuning.persistent_attn_rows` rows each, at most SMs / Hkv chunks.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from evokernel.ops import cuda_build
from evokernel.ops.tuning import DecodeTuning

NAME = "decode_persistent"
HEAD_DIM = 128
GROUP = 2
SLOT = 16384
MAX_SLOTS = 16
WARPS = 7
MAX_HIDDEN = 8 * 32 * WARPS  # one batch of polled words a consumer thread
MAX_ROWS = 64  # rows of a stage a CTA
PART = 2 * GROUP + GROUP * HEAD_DIM
DTYPES = {torch.bfloat16: 0, torch.float16: 1}


@functools.cache
def library(device: torch.device) -> ctypes.CDLL | None:
    lib = cuda_build.cuda_library(NAME, device)
    if lib is not None:
        declare(lib)
    return lib


def declare(lib: ctypes.CDLL) -> None:
    """The C signatures of the library's entry points."""
    cuda_build.declare_launcher(lib, "evk_decode_persistent")
    lib.evk_decode_persistent_static_smem.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.evk_decode_persistent_static_smem.restype = ctypes.c_int


def _rows(n: int, ctas: int) -> int:
    return -(-n // ctas)


def shape_why_not(cfg: Any, weights: Any, batch: int, ctas: int) -> str | None:
    """Why the kernel cannot run this model's step (shapes and weights only), or None."""
    D, hq, hkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    H, inter = cfg.hidden_size, cfg.intermediate_size
    if batch != 1:
        return f"batch {batch} (the persistent step is batch 1)"
    if D != HEAD_DIM or hq != GROUP * hkv:
        return f"head_dim {D} with {hq}/{hkv} heads (needs 128 with 2 query heads per kv head)"
    if weights.dtype not in DTYPES:
        return f"dtype {weights.dtype}"
    for lw in weights.layers:
        parts = (lw.qkv_proj, lw.o_proj, lw.gate_up_proj, lw.down_proj)
        if not all(isinstance(w, torch.Tensor) and w.is_contiguous() for w in parts):
            return "packed or strided projections"
        if lw.qkv_bias is not None or lw.q_norm is None or lw.k_norm is None:
            return "q/k/v biases or no q/k norms"
    if any(n % 256 for n in (H, inter, hq * D)):
        return "hidden, intermediate or Hq*head_dim not a multiple of 256"
    itemsize = weights.dtype.itemsize
    if max(H, inter, hq * D) * itemsize > SLOT:
        return "a projection row wider than one 16 KB ring slot"
    nqkv = (hq + 2 * hkv) * D
    if max(_rows(nqkv, ctas), 2 * _rows(inter, ctas), _rows(H, ctas)) > MAX_ROWS:
        return f"more than {MAX_ROWS} rows a CTA in one stage on {ctas} SMs"
    if H > MAX_HIDDEN:
        return f"hidden size {H} (at most {MAX_HIDDEN})"
    return None


def rows_per_chunk(K: int, itemsize: int) -> int:
    """Rows of a K-wide projection one ring slot takes: the largest power of two that fits."""
    rows = 1
    while 2 * rows * K * itemsize <= SLOT:
        rows *= 2
    return rows


def stage_chunks(cfg: Any, itemsize: int, ctas: int) -> int:
    """Ring slots the widest stage of a CTA takes (its rows in chunks of `rows_per_chunk`)."""
    H, inter, D = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    hq, hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    stages = (((hq + 2 * hkv) * D, H, 1), (H, hq * D, 1), (inter, H, 2), (H, inter, 1))
    return max(segs * -(-_rows(n, ctas) // rows_per_chunk(k, itemsize)) for n, k, segs in stages)


def ring_slots(cfg: Any, weights: Any, static_smem: int) -> int:
    """16 KB ring slots a CTA's shared memory holds beside the kernel's static use and the
    activations (at most MAX_SLOTS)."""
    props = torch.cuda.get_device_properties(weights.device)
    optin = int(getattr(props, "shared_memory_per_block_optin", 227 * 1024))
    xs = max(cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads * HEAD_DIM) * 4
    return int(min(MAX_SLOTS, (optin - static_smem - xs - 1024) // SLOT))


def split_for(bound: int, hkv: int, ctas: int, attn_rows: int) -> tuple[int, int]:
    """(chunks per kv head, rows per chunk, a multiple of 16) for a bound on seq_lens."""
    split = max(1, min(ctas // hkv, -(-bound // attn_rows)))
    rows = -(-bound // split)
    return split, -(-rows // 16) * 16


class PersistentLayers:
    """The persistent step bound to one model's weights and one batch-1 cache (pointer tables
    and scratch built once; the tensors must outlive it)."""

    def __init__(
        self, cfg: Any, weights: Any, cache: Any, cos: torch.Tensor, sin: torch.Tensor,
        tuning: DecodeTuning,
    ) -> None:  # fmt: skip
        device = weights.device
        self.cfg, self.weights, self.cache, self.tuning = cfg, weights, cache, tuning
        assert cos.is_contiguous() and sin.is_contiguous() and cos.dtype == torch.float32
        self.rope = (cos, sin)
        self.device = device
        lib = library(device)
        assert lib is not None, "the persistent decode library is not available (why_not)"
        self.lib: ctypes.CDLL = lib
        props = torch.cuda.get_device_properties(device)
        self.ctas = props.multi_processor_count
        self.index = device.index if device.index is not None else torch.cuda.current_device()
        L, hkv = cfg.num_hidden_layers, cfg.num_key_value_heads
        H, inter, hq, D = cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, HEAD_DIM
        dtype = weights.dtype
        static = self.lib.evk_decode_persistent_static_smem(DTYPES[dtype], self.index)
        assert static >= 0, f"kernel attributes: {self.lib.evk_error_string(-static).decode()}"
        self.slots = ring_slots(cfg, weights, static)

        def table(tensors: list[torch.Tensor]) -> torch.Tensor:
            return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64, device=device)

        ls = weights.layers
        self.tables = [
            table([lw.qkv_proj for lw in ls]), table([lw.o_proj for lw in ls]),
            table([lw.gate_up_proj for lw in ls]), table([lw.down_proj for lw in ls]),
            table([lw.input_norm for lw in ls]), table([lw.post_attn_norm for lw in ls]),
            table([lw.q_norm for lw in ls]), table([lw.k_norm for lw in ls]),
            table(list(cache.k)), table(list(cache.v)),
        ]  # fmt: skip
        nqkv = (hq + 2 * hkv) * D
        assert stage_chunks(cfg, dtype.itemsize, self.ctas) <= self.slots
        # Tagged activation words (tag 0: never written)
        self.x_words, self.qkv_words, self.attn_words, self.act_words = (
            torch.zeros(n, device=device, dtype=torch.int32) for n in (H, nqkv, hq * D, inter)
        )
        self.part = torch.empty(self.ctas * PART, device=device, dtype=torch.float32)
        self.tickets = torch.zeros(L * hkv + 1, device=device, dtype=torch.int32)
        self.step = torch.zeros(1, device=device, dtype=torch.int32)
        self.err = torch.zeros(1, device=device, dtype=torch.int32)
        # Set to a zeroed int64 tensor of C * L * 32 to record the kernel's timeline stamps.
        self.trace: torch.Tensor | None = None
        k = cache.k[0]
        assert all(t.stride() == k.stride() and t.shape == k.shape for t in (*cache.k, *cache.v))
        assert k.stride(3) == 1 and k.stride(2) == D
        self.strides = (ctypes.c_int64 * 2)(k.stride(1), k.stride(2))

    @classmethod
    def build(
        cls, cfg: Any, weights: Any, cache: Any, cos: torch.Tensor, sin: torch.Tensor,
        tuning: DecodeTuning,
    ) -> PersistentLayers | None:  # fmt: skip
        if why_not(cfg, weights, cache) is not None:
            return None
        return cls(cfg, weights, cache, cos, sin, tuning)

    def error(self) -> bool:
        """Whether a launch so far raised the kernel's error flag (syncs; it stays up)."""
        return bool(self.err.item())

    def __call__(
        self, tokens: torch.Tensor, positions: torch.Tensor, seq_lens: torch.Tensor, bound: int
    ) -> torch.Tensor:
        cfg, w, cache = self.cfg, self.weights, self.cache
        assert tokens.shape == (1,) and tokens.dtype == torch.int64
        assert positions.dtype == seq_lens.dtype == torch.int32
        bound = min(bound, cache.max_seq_len)
        hkv = cfg.num_key_value_heads
        split, chunk_rows = split_for(bound, hkv, self.ctas, self.tuning.persistent_attn_rows)
        x = torch.empty(1, cfg.hidden_size, device=self.device, dtype=w.dtype)
        cos, sin = self.rope
        tensors = (
            *self.tables, w.embed_tokens, tokens, positions, seq_lens, cos, sin, x,
            self.x_words, self.qkv_words, self.attn_words, self.act_words, self.part,
            self.tickets, self.step, self.err,
        )  # fmt: skip
        trace = self.trace.data_ptr() if self.trace is not None else 0
        ptrs = (ctypes.c_void_p * (len(tensors) + 1))(*(t.data_ptr() for t in tensors), trace)
        floats = (ctypes.c_float * 2)(cfg.head_dim**-0.5, cfg.rms_norm_eps)
        ints = (ctypes.c_int * 11)(
            cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, hkv,
            cache.max_seq_len, cos.shape[0], split, chunk_rows, self.slots, self.ctas, self.index,
        )  # fmt: skip
        stream = torch.cuda.current_stream(self.device).cuda_stream
        err = self.lib.evk_decode_persistent(
            DTYPES[w.dtype], int(self.tuning.pdl), ptrs, floats, ints, self.strides,
            ctypes.c_void_p(stream),
        )  # fmt: skip
        if err != 0:
            why = self.lib.evk_error_string(err).decode()
            raise RuntimeError(f"persistent decode launch failed: {why}")
        return x


def why_not(cfg: Any, weights: Any, cache: Any) -> str | None:
    """Why the persistent step cannot serve this model and cache, or None."""
    device = weights.device
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (9, 0):
        return "not a CUDA device of sm_90 or later"
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    shape = shape_why_not(cfg, weights, cache.batch, sms)
    if shape is not None:
        return shape
    lib = library(device)
    if lib is None:
        return f"the CUDA library: {cuda_build.why_not(NAME, device)}"
    index = device.index if device.index is not None else torch.cuda.current_device()
    static = lib.evk_decode_persistent_static_smem(DTYPES[weights.dtype], index)
    if static < 0:
        return f"the kernel's attributes: {lib.evk_error_string(-static).decode()}"
    slots, chunks = ring_slots(cfg, weights, static), stage_chunks(cfg, weights.dtype.itemsize, sms)
    if chunks > slots:
        return f"a stage of {chunks} ring chunks a CTA, more than the {slots} slots that fit"
    return None
