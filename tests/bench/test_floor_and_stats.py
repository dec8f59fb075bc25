"""Bandwidth-floor arithmetic and the step statistics of the decode benchmark."""

from __future__ import annotations

import pytest

from evokernel.bench.floor import floor_ms, kv_bytes_per_token, weight_bytes
from evokernel.bench.stepping import iqr_outliers, percentile
from evokernel.bench.systems.base import right_sized
from evokernel.model.config import ModelConfig
from evokernel.model.presets import PRESETS


def _cfg(preset: str, **changes) -> ModelConfig:
    return ModelConfig(**(PRESETS[preset] | changes))


def test_qwen3_06b_bytes_match_the_published_floor() -> None:
    cfg = _cfg("qwen3-0.6b")
    assert weight_bytes(cfg, 2) == 1_192_099_840  # 880.9 MB of layers + 311.2 MB lm_head
    assert kv_bytes_per_token(cfg, 2) == 114_688
    # H200 at 4.26 TB/s: 0.280 ms at short context, 0.307 ms at 1k, 0.390 ms at 4k.
    assert floor_ms(1_192_099_840, 114_688, 1, 4260) == pytest.approx(0.2798, abs=1e-4)
    assert floor_ms(1_192_099_840, 114_688, 1024, 4260) == pytest.approx(0.3074, abs=1e-4)
    assert floor_ms(1_192_099_840, 114_688, 4096, 4260) == pytest.approx(0.3901, abs=1e-4)


def test_untied_head_is_read_once_and_the_embedding_not_at_all() -> None:
    tied, untied = _cfg("tiny"), _cfg("tiny", tie_word_embeddings=False)
    assert weight_bytes(untied, 4) == weight_bytes(tied, 4)
    wider = _cfg("tiny", vocab_size=1024)
    assert weight_bytes(wider, 2) - weight_bytes(tied, 2) == 512 * 64 * 2


def test_percentiles_interpolate_like_numpy() -> None:
    values = sorted([4.0, 1.0, 3.0, 2.0, 10.0])
    assert percentile(values, 50) == 3.0
    assert percentile(values, 95) == pytest.approx(8.8)  # numpy.percentile(..., 95)
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 10.0
    assert percentile([7.0], 99) == 7.0


def test_outliers_are_counted_beyond_the_iqr_fences() -> None:
    steady = [1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 0.99]
    assert iqr_outliers(sorted(steady)) == 0
    assert iqr_outliers(sorted([*steady, 5.0, 0.1])) == 2


def test_caches_are_rounded_up_to_few_shapes() -> None:
    assert [right_sized(n) for n in (1, 74, 128, 129, 32842)] == [128, 128, 128, 256, 32896]
