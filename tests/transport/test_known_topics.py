"""Which reply topics exist: asked of the broker for a name not known, a missing name not
asked about again for ttl_s, a failed listing never a reason to refuse."""

from __future__ import annotations

from headrace.transport.known_topics import KnownTopics
from tests.clock import FakeClock


def test_a_missing_name_is_listed_once_per_ttl_and_a_known_one_never() -> None:
    clock = FakeClock()
    broker = {"p.replies.default"}
    listings: list[float] = []

    def list_topics() -> set[str]:
        listings.append(clock.now)
        return set(broker)

    known = KnownTopics(list_topics, clock, ttl_s=5)
    assert known.exists("p.replies.default") and len(listings) == 1
    assert known.exists("p.replies.default") and len(listings) == 1  # known: not asked
    assert not known.exists("p.replies.made-up") and len(listings) == 2
    for _ in range(100):  # a flood of the same made-up name costs nothing more
        assert not known.exists("p.replies.made-up")
    assert len(listings) == 2
    broker.add("p.replies.made-up")
    clock.now += 5.1
    assert known.exists("p.replies.made-up") and len(listings) == 3  # created since


def test_a_failed_listing_does_not_refuse() -> None:
    def broken() -> set[str]:
        raise ConnectionError("broker away")

    assert KnownTopics(broken, FakeClock()).exists("p.replies.anything")
