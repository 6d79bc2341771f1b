"""The dispatcher bench runs its core end to end on a few requests: every request leaves in
a batch once, and the figures it prints are there (their size is the bench's business)."""

from __future__ import annotations

import pytest

from bench.dispatcher import main


def test_every_request_leaves_in_a_batch_once_and_the_figures_are_printed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    figures = main(["--requests", "300", "--poll", "100"])
    assert figures.requests == 300 and 0 < figures.batches <= 300
    assert figures.per_s > 0 and figures.parse_us > 0 and figures.count_us > 0
    out = capsys.readouterr().out
    assert "requests/s" in out and "parse" in out and "count" in out
