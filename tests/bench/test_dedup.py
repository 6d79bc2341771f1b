"""The dedup bench on the real pipeline, small: with the cache and in-flight coalescing each
distinct text is computed once, however many times it is sent at once; an upstream event
evicts an entry the pipeline wrote."""

from __future__ import annotations

import os

import pytest

from bench.dedup import main
from headrace.ops.localstack import LocalStack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_coalescing_and_the_cache_compute_each_distinct_text_once(
    stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    environment = dict(os.environ)
    [on] = main(
        requests=300, distinct=40, burst=100, events=5, without_coalescing=False, cache_off=False
    )
    assert on.requests == 300 and on.unique >= 20  # a Zipf trace: many repeats
    assert on.computed == on.unique  # 1.00 forward pass per unique input
    assert len(on.evictions_ms) == 5
    assert "forward passes per unique input 1.00" in capsys.readouterr().out
    # the suite runs it in its own process: a run's settings (its tag rule) must not leak
    # into the tests after it
    assert dict(os.environ) == environment
