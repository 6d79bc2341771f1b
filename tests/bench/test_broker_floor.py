"""The broker-floor timer of the pipeline benchmark, against the real local broker."""

from __future__ import annotations

from bench.broker_floor import hop_ms
from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack


def test_each_record_is_timed_from_its_send_to_its_read_across_many_topics(
    stack: LocalStack,
) -> None:
    hops = hop_ms(Settings(), topics=3, records=4, gap_s=0.01)
    assert len(hops) == 4
    # a record cannot be read before it is sent, and each waited for its own read
    assert all(0 < hop < 10_000 for hop in hops)
