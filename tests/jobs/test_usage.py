"""Per-tenant usage in the SQL store (SQLite and PostgreSQL) with a real Redis: a flush adds
each minute once, even after a flusher died between its commit and clearing Redis; totals
include the minutes still counting; the gateway serves a tenant only its own usage."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from headrace import connections
from headrace.config.settings import Settings
from headrace.jobs.store import JobStore
from headrace.jobs.usage import flush, seconds_of, totals
from headrace.ops.localstack import LocalStack
from headrace.usage.meter import Totals, UsageMeter
from tests.clock import FakeClock
from tests.gateway.gateway_proc import auth, running_gateway

T0 = 1_800_000_000.0


def meter_for(prefix: str, now: float = T0) -> UsageMeter:
    return UsageMeter(connections.redis_client(Settings()), prefix, clock=FakeClock(now))


def test_a_flush_adds_each_minute_once(stack: LocalStack, store_url: str) -> None:
    store = JobStore(store_url)
    meter = meter_for(f"t-usage-{uuid.uuid4().hex[:8]}")
    meter.add({"acme": Totals(requests=2, tokens=20, device_ms=8.0, cache_hits=1)})
    meter.clock.now += 61  # type: ignore[attr-defined]
    meter.add({"acme": Totals(requests=1, tokens=5, device_ms=2.0)})
    assert flush(store, meter) == 0  # nothing closed yet
    meter.clock.now += 89  # type: ignore[attr-defined]  # the first minute closed: T0 + 150
    assert flush(store, meter) == 1

    # a flusher that dies after its commit but before clearing Redis: applied once
    meter.clock.now += 120  # type: ignore[attr-defined]
    original = meter.applied
    meter.applied = lambda taken: None  # type: ignore[method-assign]
    assert flush(store, meter) == 1
    meter.applied = original  # type: ignore[method-assign]
    assert flush(store, meter) == 0  # recorded already: only cleared now
    assert meter.take_closed() == []

    since = datetime.fromtimestamp(T0 - 60, UTC)
    assert totals(store, meter, since) == {
        "acme": Totals(requests=3, tokens=25, device_ms=10.0, cache_hits=1)
    }
    later = datetime.fromtimestamp(T0 + 60, UTC)  # only the second minute
    assert totals(store, meter, later)["acme"].requests == 1


def test_totals_add_minutes_still_counting_and_keep_tenants_apart(
    stack: LocalStack, tmp_path: Path
) -> None:
    store = JobStore(f"sqlite:///{tmp_path}/usage.db")
    meter = meter_for(f"t-usage-{uuid.uuid4().hex[:8]}")
    meter.add({"acme": Totals(requests=1, device_ms=4.0), "globex": Totals(requests=7)})
    meter.clock.now += 181  # type: ignore[attr-defined]
    flush(store, meter)
    meter.add({"acme": Totals(requests=2, device_ms=6.0)})  # still counting
    since = datetime.fromtimestamp(T0 - 60, UTC)
    assert totals(store, meter, since, tenant="acme") == {
        "acme": Totals(requests=3, device_ms=10.0)
    }
    assert totals(store, None, since, tenant="acme") == {"acme": Totals(requests=1, device_ms=4.0)}
    assert totals(store, meter, since)["globex"].requests == 7


def test_durations() -> None:
    assert [seconds_of(d) for d in ("90s", "30m", "1h", "7d")] == [90, 1800, 3600, 604800]
    for bad in ("1 hour", "h", "-1h", "1w"):
        with pytest.raises(ValueError, match="a duration"):
            seconds_of(bad)


def test_the_gateway_serves_a_tenant_its_own_usage(stack: LocalStack, tmp_path: Path) -> None:
    prefix = f"t-usage-gw-{uuid.uuid4().hex[:8]}"
    now = datetime.now(UTC).timestamp()
    meter = meter_for(prefix, now)
    meter.add({"acme": Totals(requests=5, tokens=50, device_ms=1500.0, cache_hits=2)})
    meter.add({"globex": Totals(requests=9)})
    with (
        running_gateway({"HEADRACE_TOPIC_PREFIX": prefix}, tmp_path) as (url, keys),
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        mine = http.get("/v1/usage", params={"since": "1h"}, headers=auth(keys["acme"]))
        assert mine.status_code == 200, mine.text
        body = mine.json()
        assert body["object"] == "usage" and body["tenant"] == "acme"
        assert (body["requests"], body["tokens"], body["cache_hits"]) == (5, 50, 2)
        assert body["device_seconds"] == pytest.approx(1.5)
        bad = http.get("/v1/usage", params={"since": "forever"}, headers=auth(keys["acme"]))
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "since"
        assert http.get("/v1/usage").status_code == 401
        theirs = http.get("/v1/usage", headers=auth(keys["globex"])).json()
        assert (theirs["tenant"], theirs["requests"], theirs["tokens"]) == ("globex", 9, 0)
