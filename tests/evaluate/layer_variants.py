"""Decode-layer candidates made from the honest torch-ops layer (layer_hostile/
honest_torch_layer.py) by replacing a few exact texts in it, so each attack is the honest
layer plus one visible change (CPU suite: test_layer_hostile.py; GPU: test_layer_gpu.py)."""

from __future__ import annotations

from eval_helpers import HERE

HONEST_LAYER = HERE / "layer_hostile" / "honest_torch_layer.py"


def layer_variant(what: str, expected: str, edits: dict[str, str]) -> str:
    """The honest layer with its docstring replaced by what the variant does and the reason
    expected, and each `edits` key (present exactly once) replaced by its value."""
    body = HONEST_LAYER.read_text().split('"""', 2)[2]
    source = f'"""Hostile: {what}. Expected: {expected}."""{body}'
    for before, after in edits.items():
        assert source.count(before) == 1, (what, before)
        source = source.replace(before, after)
    return source


# Correct in eager calls (test_layer_hostile.py checks that on the CPU), impossible to capture
# in a CUDA graph: the GPU suite expects `graph-capture`.
HOST_SYNC = layer_variant(
    "the honest layer, except that it reads the longest sequence length back to the host "
    "(`int(seq_lens.max())`) to size attention: right in eager calls, impossible to capture "
    "in a CUDA graph",
    "graph-capture",
    {"    n = min(max_len, S)\n": "    n = int(seq_lens.max())  # the host sync\n"},
)
