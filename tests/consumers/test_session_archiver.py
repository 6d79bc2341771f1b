"""The session archiver in the invalidator, on the real Redis and SeaweedFS: a session idle
past session_idle_s is in S3 and not in Redis, and the next turn sees its whole history."""

from __future__ import annotations

import threading
import uuid

import pytest

from headrace.config.settings import Settings
from headrace.consumers.invalidation import Invalidator
from headrace.ops.localstack import LocalStack
from headrace.sessions.store import Turn, open_sessions
from tests.eventually import eventually

pytestmark = pytest.mark.timeout(120)


def test_the_invalidator_archives_idle_sessions_and_the_next_turn_sees_them(
    stack: LocalStack,
) -> None:
    settings = Settings(
        topic_prefix=f"t-archive-{uuid.uuid4().hex[:8]}",
        session_idle_s=1.0,
        session_archive_every_s=0.2,
    )
    store = open_sessions(settings)
    turns = [Turn(role="user", content="where does the water go?")]
    turns.append(Turn(role="assistant", content="along the headrace to the wheel"))
    written = store.append(store.get("acme", "chat-1"), turns)
    key = store._key("acme", "chat-1")
    invalidator = Invalidator(settings)
    stop = threading.Event()
    thread = threading.Thread(target=invalidator.run, args=(stop,), daemon=True)
    thread.start()
    try:
        eventually(lambda: not store.redis.exists(key), 30, "the idle session archived")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert invalidator.counts["sessions_archived"] >= 1
    assert store.archive.get(store._object("acme", "chat-1")) is not None  # in S3
    later = open_sessions(settings)  # another process, later: nothing in its L1
    back = later.get("acme", "chat-1")
    assert back.version == written.version and back.turns == written.turns
    assert later.stats["s3"] == 1
    nxt = later.append(back, [Turn(role="user", content="and then?")])
    assert [t.content for t in nxt.turns][:2] == [t.content for t in turns]
    assert nxt.version == written.version + 1


def test_the_l1_is_bounded_in_bytes(stack: LocalStack) -> None:
    settings = Settings(topic_prefix=f"t-l1-{uuid.uuid4().hex[:8]}", session_l1_max_bytes=4096)
    store = open_sessions(settings)
    for i in range(20):
        store.append(store.get("acme", f"s{i}"), [Turn(role="user", content="x" * 1000)])
    assert 0 < store.l1.currsize <= 4096 and len(store.l1) < 20
    assert ("acme", "s19") in store.l1  # the most recent stay
    huge = store.append(store.get("acme", "big"), [Turn(role="user", content="y" * 10_000)])
    assert ("acme", "big") not in store.l1 and huge.version == 1  # too large to keep
    assert store.get("acme", "big").turns == huge.turns  # still read, from Redis
