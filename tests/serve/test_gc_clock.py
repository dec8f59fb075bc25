"""serve/gc_clock.py: the collector's pauses are summed while the clock is installed, and the
heap alive at `settle` is frozen (never walked again)."""

from __future__ import annotations

import gc

from evokernel.serve.gc_clock import GcClock, settle


def test_the_clock_sums_collections_and_settle_freezes_the_heap():
    clock = GcClock()
    try:
        gc.collect()
        gc.collect(0)
        assert clock.collections == 2 and clock.seconds > 0
    finally:
        clock.close()
    gc.collect()
    assert clock.collections == 2  # closed: no longer counting
    try:
        settle()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
