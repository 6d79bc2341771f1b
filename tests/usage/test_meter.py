"""Per-tenant usage counted in a real Redis, with an injected clock: minutes close, are taken
under flush keys of their own, late increments are not lost, tenants never mix."""

from __future__ import annotations

import uuid

import pytest

from headrace import connections
from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.usage.meter import Totals, UsageMeter
from tests.clock import FakeClock

T0 = 1_800_000_000.0  # on a minute boundary


@pytest.fixture
def meter(stack: LocalStack) -> UsageMeter:
    prefix = f"t-usage-{uuid.uuid4().hex[:8]}"
    return UsageMeter(connections.redis_client(Settings()), prefix, clock=FakeClock(T0))


def test_a_minute_is_taken_once_it_closed(meter: UsageMeter) -> None:
    meter.add({"acme": Totals(requests=2, tokens=30, device_ms=12.5)})
    meter.add({"acme": Totals(requests=1, tokens=10, device_ms=2.5), "globex": Totals(1, 5)})
    assert meter.take_closed() == []  # still counting
    assert {t.tenant: t.totals for t in meter.still_open(0)} == {
        "acme": Totals(requests=3, tokens=40, device_ms=15.0),
        "globex": Totals(requests=1, tokens=5),
    }
    meter.clock.now += 181  # type: ignore[attr-defined]
    taken = {t.tenant: t for t in meter.take_closed()}
    assert set(taken) == {"acme", "globex"}
    assert taken["acme"].totals == Totals(requests=3, tokens=40, device_ms=15.0)
    assert taken["acme"].minute == int(T0 // 60)
    assert meter.still_open(0) == []
    # not applied yet (a flusher died): the same flush keys come back, nothing new
    again = {t.tenant: t.flush_key for t in meter.take_closed()}
    assert again == {name: t.flush_key for name, t in taken.items()}
    for t in taken.values():
        meter.applied(t)
    assert meter.take_closed() == []


def test_a_late_increment_after_the_take_starts_a_new_count(meter: UsageMeter) -> None:
    meter.add({"acme": Totals(requests=1)})
    meter.clock.now += 181  # type: ignore[attr-defined]
    [first] = meter.take_closed()
    meter.clock.now -= 181  # type: ignore[attr-defined]  # a slow batch, counted late
    meter.add({"acme": Totals(requests=4)})
    meter.applied(first)
    meter.clock.now += 181  # type: ignore[attr-defined]
    [second] = meter.take_closed()
    assert (first.totals.requests, second.totals.requests) == (1, 4)
    assert first.minute == second.minute and first.flush_key != second.flush_key


def test_cache_hits_count_apart_and_tenants_with_colons_parse(meter: UsageMeter) -> None:
    meter.add({"org:team": Totals(cache_hits=3)})
    [open_] = meter.still_open(0)
    assert (open_.tenant, open_.totals) == ("org:team", Totals(cache_hits=3))
