"""Sessions on the real Redis and SeaweedFS: compare-and-set writes, the conflict policy
(appends merge, replaces refuse), the L1 never hiding another process's write, archiving
idle sessions to S3 (zstd) and bringing them back at the same version, tenants apart."""

from __future__ import annotations

import uuid

import pytest
import zstandard

from headrace import connections
from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.sessions.store import Session, SessionConflict, SessionStore, Turn
from tests.clock import FakeClock

pytestmark = pytest.mark.timeout(60)


def make_store(prefix: str, clock: FakeClock) -> SessionStore:
    settings = Settings()
    return SessionStore(
        connections.redis_client(settings),
        connections.s3_client(settings),
        "headrace-test-sessions",
        prefix,
        clock=clock,
    )


@pytest.fixture
def stores(stack: LocalStack) -> tuple[SessionStore, SessionStore, FakeClock]:
    """Two stores on one prefix: two processes."""
    prefix, clock = f"t-sess-{uuid.uuid4().hex[:8]}", FakeClock(1_000_000.0)
    return make_store(prefix, clock), make_store(prefix, clock), clock


def test_concurrent_appends_all_land_once(
    stores: tuple[SessionStore, SessionStore, FakeClock],
) -> None:
    a, b, _ = stores
    start = a.append(a.get("acme", "s1"), [Turn(role="user", content="hello")])
    assert start.version == 1
    stale_a, stale_b = a.get("acme", "s1"), b.get("acme", "s1")
    first = Turn(role="assistant", content="from a")
    second = Turn(role="user", content="from b")
    assert a.append(stale_a, [first]).version == 2
    merged = b.append(stale_b, [second])  # based on version 1: conflicts, then merges
    assert merged.version == 3 and b.stats["conflicts"] == 1
    assert [t.content for t in merged.turns] == ["hello", "from a", "from b"]
    again = b.append(stale_b, [second])  # a retried append does not land twice
    assert again.version == 3 and len(again.turns) == 3
    assert [t.content for t in a.get("acme", "s1").turns] == ["hello", "from a", "from b"]


def test_a_stale_replace_is_refused_with_the_current_version(
    stores: tuple[SessionStore, SessionStore, FakeClock],
) -> None:
    a, b, _ = stores
    v1 = a.append(a.get("acme", "s2"), [Turn(role="user", content="one")])
    seen_by_b = b.get("acme", "s2")
    a.append(v1, [Turn(role="user", content="two")])
    with pytest.raises(SessionConflict) as err:
        b.replace(seen_by_b, [Turn(role="system", content="rewritten")])
    assert err.value.current.version == 2 and len(err.value.current.turns) == 2
    fresh = b.replace(err.value.current, [Turn(role="system", content="rewritten")])
    assert fresh.version == 3 and [t.content for t in a.get("acme", "s2").turns] == ["rewritten"]


def test_l1_serves_repeat_reads_but_never_hides_a_newer_version(
    stores: tuple[SessionStore, SessionStore, FakeClock],
) -> None:
    a, b, _ = stores
    a.append(a.get("acme", "s3"), [Turn(role="user", content="x")])
    b.get("acme", "s3")
    b.get("acme", "s3")
    assert b.stats["l1"] == 1
    a.append(a.get("acme", "s3"), [Turn(role="user", content="y")])
    assert [t.content for t in b.get("acme", "s3").turns] == ["x", "y"]


def test_idle_sessions_move_to_s3_and_come_back_at_their_version(
    stores: tuple[SessionStore, SessionStore, FakeClock],
) -> None:
    a, b, clock = stores
    kept = a.append(a.get("acme", "old"), [Turn(role="user", content="archive me")])
    clock.now += 3600
    a.append(a.get("acme", "new"), [Turn(role="user", content="still warm")])
    assert a.archive_idle(idle_s=600) == 1
    assert a.redis.exists(a._key("acme", "old")) == 0
    archive = a.archive
    raw = archive.s3.get_object(Bucket=archive.bucket, Key=a._object("acme", "old"))["Body"].read()
    assert Session.model_validate_json(zstandard.ZstdDecompressor().decompress(raw)) == kept
    back = b.get("acme", "old")
    assert back.version == 1 and back.turns == kept.turns and b.stats["s3"] == 1
    assert b.append(back, [Turn(role="assistant", content="welcome back")]).version == 2


def test_tenants_do_not_share_sessions(
    stores: tuple[SessionStore, SessionStore, FakeClock],
) -> None:
    a, _, _ = stores
    a.append(a.get("acme", "same-id"), [Turn(role="user", content="acme's")])
    other = a.get("globex", "same-id")
    assert other.version == 0 and other.turns == []
