"""The dedup bench on the real pipeline, small: with the cache and in-flight coalescing each
distinct text is computed once; with the cache off, every request is; an upstream event
evicts an entry the pipeline wrote."""

from __future__ import annotations

import pytest

from bench.dedup import main
from headrace.ops.localstack import LocalStack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_coalescing_and_the_cache_compute_each_distinct_text_once(
    stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    off, on = main(requests=300, distinct=40, burst=100, events=5, without_coalescing=False)
    assert off.computed == off.requests == 300
    assert on.unique == off.unique and on.computed == on.unique  # 1.00 per unique input
    assert len(on.evictions_ms) == 5
    assert "forward passes per unique input 1.00" in capsys.readouterr().out
