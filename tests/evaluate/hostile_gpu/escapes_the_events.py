"""Hostile (GPU): builds a stream without the (wrapped) torch.cuda.Stream constructor, then
runs a long spin and the seed's kernels on it and restores the current stream, so the events on
the launching stream see almost nothing. Its outputs are right (the harness synchronizes the
device before reading them). Expected, found during timing: timer-mismatch, and from the
profiler side-stream (its kernels are the seed's, not its own: kernels-missing too)."""

import importlib.util

import torch

import evokernel.tasks

# EVOLVE-BLOCK-START
SIDE = []
# EVOLVE-BLOCK-END


def _load_seed():
    path = evokernel.tasks.get_task("gqa_decode_attention").seed_candidate
    spec = importlib.util.spec_from_file_location("_escaping_seed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SEED = _load_seed()


def attention(q, k_cache, v_cache, seq_lens, scale):
    if not SIDE:
        SIDE.append(torch._C._CudaStreamBase.__new__(torch.cuda.Stream, priority=0))
    SIDE[0].wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(SIDE[0]):
        torch.cuda._sleep(400_000)  # ~200 us of GPU time the events do not see
        return SEED.attention(q, k_cache, v_cache, seq_lens, scale)
