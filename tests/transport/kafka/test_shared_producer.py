"""Writers sharing one producer (``SharedProducer``): one client for all of them, each
flushing and told of only its own records; a producer replaced for one writer stays open
for another's records on it; one given up as stuck by one writer is read back by every
writer with records on it, and only what is missing is sent again."""

from __future__ import annotations

from typing import Any

import pytest

from headrace.transport.kafka import delivery
from headrace.transport.kafka.shared_producer import SharedProducer
from tests.transport.kafka.fake_producer import FakeProducer, Log, reading


def _maker(*producers: FakeProducer) -> tuple[Any, list[dict[str, Any]]]:
    made = iter(producers)
    options: list[dict[str, Any]] = []

    def factory(**more: Any) -> FakeProducer:
        options.append(more)
        return next(made)

    return factory, options


def _writer(share: SharedProducer, log: Log, timeout_s: float = 5) -> delivery.ReliableProducer:
    def unused(**_: Any) -> FakeProducer:
        raise AssertionError("a shared writer makes no producer of its own")

    return delivery.ReliableProducer(unused, timeout_s, readback=reading(log), share=share)


def test_writers_share_one_producer_and_each_is_told_only_of_its_own_records() -> None:
    log: Log = []
    factory, options = _maker(FakeProducer(stuck=False, log=log))
    share = SharedProducer(factory)
    a, b = _writer(share, log), _writer(share, log)
    a.send("t", b"a-0", key=b"a-0")
    b.send("t", b"b-0", key=b"b-0")
    a.send("t", b"a-1", key=b"a-1")

    assert [d.key for d in a.flush()] == [b"a-0", b"a-1"]
    assert [d.key for d in b.flush()] == [b"b-0"]
    assert a.producer is b.producer and share.made == 1 and options == [{}]
    a.close()
    assert not a.producer.closed  # b still writes on it
    share.close()
    assert b.producer.closed


def test_a_producer_replaced_for_one_writer_stays_open_for_another_then_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(delivery, "BACKOFF_S", (0.01,))
    log: Log = []
    first = FakeProducer(stuck=False, log=log, refused=frozenset({b"a-0"}))
    fresh = FakeProducer(stuck=False, log=log)
    factory, options = _maker(first, fresh)
    share = SharedProducer(factory)
    a, b = _writer(share, log), _writer(share, log)
    a.send("t", b"a-0", key=b"a-0")  # refused on the first producer
    b.send("t", b"b-0", key=b"b-0")

    assert [d.key for d in a.flush()] == [b"a-0"]  # sent again on a fresh one
    assert a.producer is fresh and b.producer is first and not first.closed
    assert [d.key for d in b.flush()] == [b"b-0"]  # its record on the old one: acknowledged
    b.send("t", b"b-1", key=b"b-1")  # nothing of b's pending: b moves to the fresh one
    assert b.producer is fresh and first.closed
    assert [d.key for d in b.flush()] == [b"b-1"]
    assert share.made == 2 and options[1] == {
        "bootstrap_timeout_ms": int(delivery.REPLACE_BOOTSTRAP_S * 1000)
    }
    assert sorted(log) == [(k, k) for k in (b"a-0", b"b-0", b"b-1")]


def test_a_producer_given_up_by_one_writer_is_read_back_by_every_writer_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(delivery, "STALL_S", 0.3)
    monkeypatch.setattr(delivery, "SLICE_S", 0.05)
    log: Log = []
    stuck, fresh = FakeProducer(stuck=True, log=log), FakeProducer(stuck=False, log=log)
    factory, _ = _maker(stuck, fresh)
    share = SharedProducer(factory)
    a, b = _writer(share, log), _writer(share, log, timeout_s=2)
    for i in range(2):
        a.send("t", f"a-{i}".encode(), key=f"a-{i}".encode())
        b.send("t", f"b-{i}".encode(), key=f"b-{i}".encode())
    log += [(b"a-0", b"a-0"), (b"b-1", b"b-1")]  # reached the log before the stall

    landed_a = a.flush()  # a gives the stuck producer up: closed for b too
    assert stuck.closed and a.producer is fresh and share.given_up(stuck)
    monkeypatch.setattr(delivery, "STALL_S", 60.0)  # b would wait out its 2 s timeout
    landed_b = b.flush()  # b reads its records back without a stall of its own

    assert sorted((d.key, d.offset) for d in landed_a) == [(b"a-0", 0), (b"a-1", 2)]
    assert sorted((d.key, d.offset) for d in landed_b) == [(b"b-0", 3), (b"b-1", 1)]
    assert fresh.sent == 2 and share.made == 2  # only a-1 and b-0 again, one fresh producer
    assert sorted(log) == sorted((k, k) for k in (b"a-0", b"a-1", b"b-0", b"b-1"))
    assert b.producer is fresh


def test_a_writer_sends_on_after_another_gave_its_producer_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A record sent while the writer still had one pending on the closed producer goes on
    the fresh one (a closed producer refuses sends), and both are accounted for."""
    monkeypatch.setattr(delivery, "STALL_S", 0.3)
    monkeypatch.setattr(delivery, "SLICE_S", 0.05)
    log: Log = []
    stuck, fresh = FakeProducer(stuck=True, log=log), FakeProducer(stuck=False, log=log)
    share = SharedProducer(_maker(stuck, fresh)[0])
    a, b = _writer(share, log), _writer(share, log, timeout_s=2)
    a.send("t", b"a-0", key=b"a-0")
    b.send("t", b"b-0", key=b"b-0")
    a.flush()
    monkeypatch.setattr(delivery, "STALL_S", 60.0)
    b.send("t", b"b-1", key=b"b-1")  # b-0 still pending on the closed one

    assert sorted(d.key for d in b.flush()) == [b"b-0", b"b-1"]
    assert sorted(log) == sorted((k, k) for k in (b"a-0", b"b-0", b"b-1"))


def test_a_send_that_meets_a_producer_closed_meanwhile_goes_on_the_fresh_one() -> None:
    """Another writer gives the producer up between a writer's look and its send (a closed
    producer refuses the send): the record goes on the fresh one, not back as an error."""
    log: Log = []
    first, fresh = FakeProducer(stuck=False, log=log), FakeProducer(stuck=False, log=log)
    share = SharedProducer(_maker(first, fresh)[0])
    b = _writer(share, log)
    first.on_send = lambda: share.give_up(first)

    b.send("t", b"b-0", key=b"b-0")

    assert first.closed and b.producer is fresh
    assert [d.key for d in b.flush()] == [b"b-0"] and log == [(b"b-0", b"b-0")]
