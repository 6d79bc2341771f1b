"""Reply consumers on the in-process transport (the seam's contract is checked against the
real broker in tests/transport): the listener resolves the futures of replies sent after it
started, hands stream deltas to their watcher, and counts a second reply for a request as a
duplicate and a reply nobody awaits as unmatched; a stream in a consumer group carries on
after a restart where it stopped."""

from __future__ import annotations

import threading

import pytest

from headrace.config.settings import Settings
from headrace.consumers.replies import ReplyListener, stream_replies
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import Reply, StreamDelta
from headrace.transport.memory import MemoryTransport

pytestmark = pytest.mark.timeout(30)
TOPIC = "t.replies"


def send(transport: MemoryTransport, *messages: Reply | StreamDelta) -> None:
    writer = transport.writer(1)
    for m in messages:
        writer.send(TOPIC, m.model_dump_json().encode(), key=m.request_id.encode())
    writer.flush()


def reply(request_id: str) -> Reply:
    return Reply.failure(request_id, "acme", "m", ErrorCode.internal, "a reply")


def test_the_listener_resolves_replies_and_counts_duplicates_and_strays() -> None:
    transport = MemoryTransport()
    send(transport, reply("before"))  # sent before it started: not its business
    listener = ReplyListener(transport, TOPIC).start()
    try:
        future = listener.expect("acme", "r1")
        assert listener.expect("acme", "r1") is future
        send(transport, reply("r1"), reply("r1"), reply("other"))
        assert future.result(timeout=5).request_id == "r1"
        marker = listener.expect("acme", "r2")
        send(transport, reply("r2"))
        marker.result(timeout=5)
        assert (listener.duplicates, listener.unmatched) == (1, 1)
        assert listener.pending() == 0
    finally:
        listener.close()


def test_the_listener_hands_deltas_to_their_watcher_before_the_reply() -> None:
    transport = MemoryTransport()
    listener = ReplyListener(transport, TOPIC).start()
    pieces: list[str] = []
    got_all = threading.Event()

    def on_delta(delta: StreamDelta) -> None:
        pieces.append(delta.text)
        if len(pieces) == 2:
            got_all.set()

    try:
        future = listener.expect("acme", "g1")
        listener.watch("acme", "g1", on_delta)
        deltas = [
            StreamDelta(request_id="g1", tenant="acme", model="m", seq=i, text=t)
            for i, t in enumerate(["he", "llo"])
        ]
        send(transport, *deltas, reply("g1"))
        assert future.result(timeout=5).request_id == "g1"
        assert got_all.wait(5) and pieces == ["he", "llo"]
    finally:
        listener.close()


def test_a_stream_in_a_group_carries_on_where_it_stopped() -> None:
    transport = MemoryTransport()
    settings = Settings()
    send(transport, reply("a"), reply("b"))
    first = stream_replies(
        settings,
        TOPIC,
        group_id="readers",
        from_beginning=True,
        idle_timeout_s=0.3,
        transport=transport,
    )
    assert [r.request_id for r in first] == ["a", "b"]
    send(transport, reply("c"), reply("c"))  # the second "c" is a duplicate
    again = stream_replies(
        settings, TOPIC, group_id="readers", idle_timeout_s=0.3, transport=transport
    )
    assert [r.request_id for r in again] == ["c"]
