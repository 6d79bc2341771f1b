"""The dispatcher's and the workers' collector settings: what was alive at its start is frozen (no
collection walks it again) and the youngest generation waits for more allocations."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from headrace.workers.collector import YOUNG_THRESHOLD, tune_collector


@pytest.fixture
def collector_restored() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.mark.usefixtures("collector_restored")
def test_the_start_is_frozen_and_young_collections_are_rarer() -> None:
    _, middle, old = gc.get_threshold()
    held = {"held": ["at start"]}
    assert any(o is held for o in gc.get_objects())  # walked by the collector
    tune_collector()
    assert gc.get_freeze_count() > 0
    assert not any(o is held for o in gc.get_objects())  # frozen: walked no more
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old)
