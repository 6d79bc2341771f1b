"""The transport seam's contract, held by both implementations: kafka-python against the
real broker (tansu), and the in-process one the unit tests use. What a unit test on the
memory transport relies on is checked here against the real thing."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from headrace.config.settings import Settings
from headrace.transport import Partition, Reader, Record, Transport, open_transport
from headrace.transport.memory import MemoryTransport

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["memory", "kafka"])
def transport(request: pytest.FixtureRequest) -> Iterator[Transport]:
    if request.param == "memory":
        yield MemoryTransport()
    else:
        request.getfixturevalue("stack")  # the local stack's tansu
        yield open_transport(Settings())


@pytest.fixture
def topic(transport: Transport) -> str:
    name = f"t-contract-{uuid.uuid4().hex[:8]}"
    transport.ensure_topics([name], partitions=1)
    return name


class Listener:
    def __init__(self) -> None:
        self.assignments: list[list[Partition]] = []

    def assigned(self, partitions: list[Partition]) -> None:
        self.assignments.append(partitions)

    def revoked(self, partitions: list[Partition]) -> None:
        pass

    def lost(self, partitions: list[Partition]) -> None:
        pass


def values(reader: Reader, count: int, timeout_s: float = 20) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        reader.expect(awaited=True)
        for records in reader.poll(100).values():
            out += [r.value for r in records]
    return out


def joined(reader: Reader, timeout_s: float = 20) -> set[Partition]:
    """Poll until the group has assigned partitions and their positions are known."""
    deadline = time.monotonic() + timeout_s
    while not reader.assignment() and time.monotonic() < deadline:
        reader.poll(100)
    assignment = reader.assignment()
    for partition in assignment:
        reader.position(partition)
    return assignment


def write(transport: Transport, topic: str, *payloads: bytes) -> list[int]:
    writer = transport.writer(10)
    try:
        for p in payloads:
            writer.send(topic, p, key=p)
        return [d.offset for d in writer.flush()]
    finally:
        writer.close()


def test_a_flush_says_where_records_landed_and_a_scan_reads_them_back(
    transport: Transport, topic: str
) -> None:
    offsets = write(transport, topic, b"a", b"b", b"c")
    assert offsets == [0, 1, 2]
    scanned: list[Record] = list(transport.scan(topic))
    assert [(r.offset, r.key, r.value) for r in scanned] == [
        (0, b"a", b"a"),
        (1, b"b", b"b"),
        (2, b"c", b"c"),
    ]
    assert [r.value for r in transport.scan(topic, partition=0, start=1)] == [b"b", b"c"]


def test_an_assigned_reader_starts_where_asked_and_seeks(transport: Transport, topic: str) -> None:
    write(transport, topic, b"old")
    from_end, from_start = transport.reader(), transport.reader()
    try:
        assert from_end.assign([topic], start="end") == [(topic, 0)]
        from_start.assign([topic], start="beginning")
        write(transport, topic, b"new")
        assert values(from_end, 1) == [b"new"]
        assert values(from_start, 2) == [b"old", b"new"]
        from_start.seek((topic, 0), 1)
        assert values(from_start, 1) == [b"new"]
        assert from_start.position((topic, 0)) == 2
    finally:
        from_end.close()
        from_start.close()


def test_a_paused_partition_yields_nothing_until_resumed(transport: Transport, topic: str) -> None:
    reader = transport.reader()
    try:
        reader.assign([topic], start="beginning")
        reader.pause([(topic, 0)])
        write(transport, topic, b"held")
        assert values(reader, 1, timeout_s=1.5) == []
        reader.resume([(topic, 0)])
        assert values(reader, 1) == [b"held"]
    finally:
        reader.close()


def test_a_group_member_is_assigned_and_a_successor_starts_at_the_commit(
    transport: Transport, topic: str
) -> None:
    group = f"{topic}.group"
    write(transport, topic, b"one", b"two")
    first, listener = transport.reader(group), Listener()
    first.subscribe([topic], listener)
    try:
        assert values(first, 2) == [b"one", b"two"]
        assert listener.assignments == [[(topic, 0)]]
        assert first.assignment() == {(topic, 0)}
        first.commit({(topic, 0): 1})  # "two" is not done
    finally:
        first.close()
    second = transport.reader(group)
    second.subscribe([topic], Listener())
    try:
        assert values(second, 1) == [b"two"]
    finally:
        second.close()


def test_a_partition_assigned_again_starts_afresh_at_the_commit(transport: Transport) -> None:
    """A member that held both partitions, read them and paused them, then gave them up to a
    rebalance and was given one back: that one is not paused and is read again from the
    commit (its owner dropped what it held past the commit when it was revoked)."""
    topic = f"t-contract-{uuid.uuid4().hex[:8]}"
    transport.ensure_topics([topic], partitions=2)
    group = f"{topic}.group"
    write(transport, topic, *[f"r{i}".encode() for i in range(8)])
    first = transport.reader(group)
    first.subscribe([topic], Listener())
    second = transport.reader(group)
    try:
        read: dict[Partition, list[Record]] = {}
        deadline = time.monotonic() + 30
        while sum(map(len, read.values())) < 8 and time.monotonic() < deadline:
            for partition, records in first.poll(100).items():
                read.setdefault(partition, []).extend(records)
        assert sorted(read) == [(topic, 0), (topic, 1)], read
        first.commit({p: 1 for p in read})  # only each partition's first record is done
        first.pause(list(read))

        # the second polls on its own thread: a join can hold its poll for seconds, and the
        # first must keep polling meanwhile or the group drops it
        second.subscribe([topic], Listener())
        joined = threading.Event()

        def poll_second() -> None:
            while not joined.is_set():
                second.poll(100)

        poller = threading.Thread(target=poll_second, daemon=True)
        poller.start()
        again: list[Record] = []
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline and not (
                len(first.assignment()) == 1 and second.assignment() and again
            ):
                for records in first.poll(100).values():
                    again += records
        finally:
            joined.set()
            poller.join(5)
        (kept,) = first.assignment()
        expected = [r.value for r in read[kept][1:]]
        while len(again) < len(expected) and time.monotonic() < deadline:
            for records in first.poll(100).values():
                again += records
        assert [r.value for r in again] == expected
    finally:
        first.close()
        second.close()


def test_a_group_without_a_commit_starts_where_reset_says(transport: Transport, topic: str) -> None:
    write(transport, topic, b"before")
    reader = transport.reader(f"{topic}.late", reset="end")
    reader.subscribe([topic], Listener())
    try:
        assert joined(reader) == {(topic, 0)}
        write(transport, topic, b"after")
        assert values(reader, 1) == [b"after"]
    finally:
        reader.close()


def test_headers_and_a_timestamp_travel_with_a_record(transport: Transport, topic: str) -> None:
    before_ms = int(time.time() * 1000) - 5_000
    writer = transport.writer(delivery_timeout_s=10)
    headers = (("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01"), ("x", b""))
    writer.send(topic, b"with headers", key=b"k", headers=headers)
    writer.send(topic, b"without", key=b"k")
    writer.flush()
    reader = transport.reader()
    reader.assign([topic], start="beginning")
    records: list[Record] = []
    deadline = time.monotonic() + 20
    while len(records) < 2 and time.monotonic() < deadline:
        for polled in reader.poll(100).values():
            records += polled
    reader.close()
    assert [r.value for r in records] == [b"with headers", b"without"]
    assert records[0].headers == headers
    assert records[0].header("traceparent") == headers[0][1]
    assert records[1].headers == () and records[1].header("traceparent") is None
    stamp = records[0].timestamp_ms
    assert stamp is not None and before_ms <= stamp <= int(time.time() * 1000) + 5_000
    [scanned, _] = list(transport.scan(topic))
    assert scanned.headers == headers
