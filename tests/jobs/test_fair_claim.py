"""Jobs are taken round the tenants: the oldest job of the tenant with the fewest running
first (pure policy), with the running counts read from the real job store."""

from __future__ import annotations

import time
from collections import Counter

from headrace.jobs.fair_claim import fair_order
from headrace.jobs.store import JobStore
from tests.jobs.test_store import make


def tenant(job: str) -> str:
    return job.split("-")[0]


def test_a_flood_of_one_tenant_takes_its_share_not_every_slot() -> None:
    # a queued 50 jobs before b and c queued 2 each: 4 slots go a, b, c, a
    queue = [f"a-{i}" for i in range(50)] + ["b-0", "c-0", "b-1", "c-1"]
    assert fair_order(queue, {}, tenant)[:4] == ["a-0", "b-0", "c-0", "a-1"]
    # over any number of slots, the tenants' shares differ by one at most while all wait
    for slots in range(1, 7):
        shares = Counter(tenant(j) for j in fair_order(queue, {}, tenant)[:slots])
        assert max(shares.values()) - min(shares.get(t, 0) for t in "abc") <= 1, shares


def test_running_jobs_count_and_a_tenant_alone_gets_every_slot() -> None:
    queue = ["a-0", "a-1", "b-0", "b-1"]
    # a runs 3 already (on any pool): b goes first until it has as many
    assert fair_order(queue, {"a": 3}, tenant) == ["b-0", "b-1", "a-0", "a-1"]
    assert fair_order(["a-0", "a-1", "a-2"], {"a": 9}, tenant) == ["a-0", "a-1", "a-2"]
    assert fair_order([], {"a": 1}, tenant) == []


def test_the_store_counts_running_jobs_per_tenant(store_url: str) -> None:
    store = JobStore(store_url)
    jobs = {name: make(store, tenant=name[0], job_id=name) for name in ("a1", "a2", "b1", "c1")}
    assert store.claim(jobs["a1"], "r1", lease_s=30)
    assert store.claim(jobs["a2"], "r2", lease_s=30)
    assert store.claim(jobs["b1"], "r1", lease_s=0.001)  # its lease runs out at once
    time.sleep(0.01)
    assert store.running_by_tenant(kind="batch") == {"a": 2}
    order = fair_order(store.claimable(kind="batch"), store.running_by_tenant(), lambda j: j.tenant)
    assert [j.id for j in order] == ["b1", "c1"]
