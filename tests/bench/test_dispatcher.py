"""The dispatcher bench runs its core end to end on a few requests, alone and through the
stack: every request leaves in a batch once, and the figures it prints are there (their size
is the bench's business)."""

from __future__ import annotations

import pytest

from bench.dispatcher import StackFigures, main
from headrace.config.settings import Settings
from headrace.connections import redis_client
from headrace.ops.localstack import LocalStack


def test_every_request_leaves_in_a_batch_once_and_the_figures_are_printed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    figures = main(["--requests", "300", "--poll", "100"])
    assert figures.requests == 300 and 0 < figures.batches <= 300
    assert figures.per_s > 0 and figures.parse_us > 0 and figures.count_us > 0
    out = capsys.readouterr().out
    assert "requests/s" in out and "parse" in out and "count" in out


def test_through_the_stack_every_request_is_read_sent_and_its_queues_deleted(
    stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--stack``: the records are read from Kafka and the batches sent through Celery to
    Redis (the local stack's, kept up by the fixture so its Redis can be asked after), and the
    Celery queues it filled are gone."""
    figures = main(["--requests", "300", "--poll", "100", "--stack"])
    assert isinstance(figures, StackFigures)
    assert figures.requests == 300 and 0 < figures.batches <= 300
    assert figures.per_s > 0 and figures.cpu_us > 0
    # the loop's thread's CPU, split: each part was timed, and they add up within it
    assert figures.poll_cpu_s > 0 and figures.send_cpu_s > 0 and figures.commit_cpu_s >= 0
    assert figures.core_cpu_s > 0 and figures.loop_cpu_s <= figures.cpu_seconds
    out = capsys.readouterr().out
    assert "through the stack" in out and "us of CPU a request" in out
    assert "Celery sends" in out and "polls" in out
    assert figures.queues and redis_client(Settings()).exists(*figures.queues) == 0


def test_larger_batches_share_the_dispatchers_cost_among_more_requests(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--batch-tokens`` and ``--overhead-tokens`` shape the batches as a GPU worker's
    would be: the same requests leave in fewer batches, and the shape is printed."""
    small = main(["--requests", "400", "--poll", "200"])
    large = main(
        [
            "--requests",
            "400",
            "--poll",
            "200",
            "--batch-tokens",
            "65536",
            "--overhead-tokens",
            "8192",
        ]
    )
    assert small.requests == large.requests == 400
    assert large.batches < small.batches
    assert "at most 65,536 padded tokens" in capsys.readouterr().out
