"""worker/runtime/collector.py: a built worker process settles Python's cyclic collector."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from worker.runtime.collector import GEN0_THRESHOLD, settle_collector


@pytest.fixture
def restored_collector() -> Iterator[None]:
    """The test process's collector as it was, afterwards."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_collector")
def test_what_is_built_is_frozen_and_the_young_generation_grows() -> None:
    """Objects alive when the process settles are never walked again; the older generations keep their
    thresholds; cyclic garbage made afterwards is still collected."""
    built = [object() for _ in range(10)]
    _, gen1, gen2 = gc.get_threshold()
    gc.unfreeze()
    settle_collector()
    assert gc.get_freeze_count() >= len(built)
    assert gc.get_threshold() == (GEN0_THRESHOLD, gen1, gen2)

    class Cycle:
        other: object = None

    first, second = Cycle(), Cycle()
    first.other, second.other = second, first
    del first, second
    assert gc.collect() >= 2  # the cycle made after settling
