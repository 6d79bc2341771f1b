"""Fair share inside a bucket and lane (deficit round robin by tokens, priority bands),
driven by an injected clock: the queue alone, then through the dispatcher's core."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.limits.policy import TenantLimits
from headrace.schemas.params import priority_rank
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.batcher import DynamicBatcher
from headrace.workers.dispatcher.fair import FairBatcher
from tests.clock import FakeClock
from tests.workers.dispatcher.rig import Rig, ids, of

Item = tuple[str, str, int, str]  # tenant, id, tokens, priority


def make(
    weights: dict[str, float] | None = None,
    budget: int = 256,
    read_ahead: int = 1_000_000,
    quantum: float = 64,
) -> tuple[FairBatcher[Item], FakeClock]:
    clock = FakeClock()
    weights = weights or {}
    fair: FairBatcher[Item] = FairBatcher(
        DynamicBatcher(budget, 20, clock),
        tenant_of=lambda item: item[0],
        band_of_item=lambda item: priority_rank(item[3]),
        weight=lambda tenant: weights.get(tenant, 1.0),
        batch_tokens=budget,
        max_wait_ms=20,
        read_ahead_tokens=read_ahead,
        quantum=quantum,
        clock=clock,
    )
    return fair, clock


def put(
    fair: FairBatcher[Item],
    tenant: str,
    n: int,
    tokens: int = 8,
    priority: str = "default",
    rng: random.Random | None = None,
) -> list[Item]:
    items = []
    for i in range(n):
        size = rng.randint(4, 16) if rng else tokens
        item = (tenant, f"{tenant}{i}", size, priority)
        assert fair.add(item, size) == []  # batches are formed by take, never by add
        items.append(item)
    return items


def batches(fair: FairBatcher[Item], n: int) -> list[list[Item]]:
    out: list[list[Item]] = []
    while len(out) < n and fair.queued():
        out += fair.take(idle=True, room=True)
    return out[:n]


def test_two_saturating_tenants_share_by_weight_over_every_window_of_ten_batches() -> None:
    fair, _ = make({"big": 3.0, "small": 1.0}, quantum=16)  # a 16th of the budget, as by default
    rng = random.Random(7)
    put(fair, "small", 3000, rng=rng)  # arrival order does not matter: small came first
    put(fair, "big", 6000, rng=rng)
    formed = batches(fair, 200)
    tokens = [Counter({t: 0 for t in ("big", "small")}) for _ in formed]
    for counted, batch in zip(tokens, formed, strict=True):
        for tenant, _, size, _ in batch:
            counted[tenant] += size
    for start in range(len(formed) - 9):
        window = sum(tokens[start : start + 10], Counter())
        assert 2.7 <= window["big"] / window["small"] <= 3.3, (start, window)


def test_a_tenant_alone_takes_every_slot_in_its_order() -> None:
    fair, _ = make({"alone": 0.1})  # a small weight still gets everything: work-conserving
    sent = put(fair, "alone", 100)
    formed = batches(fair, 100)
    assert [len(b) for b in formed] == [32, 32, 32, 4]  # 256-token budget, 8 tokens a row
    assert [item for batch in formed for item in batch] == sent


def test_a_quiet_tenants_request_rides_the_next_batch_not_the_end_of_a_flood() -> None:
    fair, _ = make()
    put(fair, "noisy", 1000)
    batches(fair, 1)
    quiet = put(fair, "quiet", 2)
    [after] = batches(fair, 1)
    assert set(quiet) <= set(after)


def test_interactive_goes_before_default_and_sheddable_after_both() -> None:
    fair, _ = make()
    shed = put(fair, "a", 4, priority="sheddable")
    default = put(fair, "b", 4)
    interactive = put(fair, "c", 4, priority="interactive")
    fair_items = [i for b in batches(fair, 10) for i in b]
    assert fair_items == interactive + default + shed
    assert (
        priority_rank("batch")
        == priority_rank("sheddable")
        > priority_rank("default")
        > priority_rank("interactive")
    )


def test_busy_workers_leave_the_queue_alone_until_a_batch_is_worth_forming() -> None:
    fair, clock = make(budget=64)
    put(fair, "a", 3)
    assert fair.take(idle=False, room=True) == []  # 24 tokens, not overdue: may grow
    assert fair.seconds_until_due() == pytest.approx(0.02)
    assert fair.seconds_until_due(room=False) is None  # it waits for a slot, not a time
    put(fair, "b", 5)  # 64 tokens: a batch's worth
    [batch] = fair.take(idle=False, room=True)
    assert [i[0] for i in batch] == ["a"] * 3 + ["b"] * 5  # a turn is 64 tokens
    put(fair, "c", 1)
    assert fair.take(idle=False, room=False) == []  # no room: however long it waits
    clock.advance_ms(20)
    assert fair.take(idle=False, room=False) == []
    assert [i[1] for b in fair.take(idle=False, room=True) for i in b] == ["c0"]  # overdue


def test_the_read_ahead_says_full_and_drain_recounts() -> None:
    fair, _ = make(read_ahead=80)
    put(fair, "a", 9)
    assert not fair.full()
    put(fair, "b", 1)
    assert fair.full() and len(fair) == 10
    dropped = fair.drain(lambda item: item[0] != "a")
    assert sorted(i[1] for i in dropped) == [f"a{i}" for i in range(9)]
    assert not fair.full() and len(fair) == 1
    assert batches(fair, 1) == [[("b", "b0", 8, "default")]]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["x", "y", "z"]),
            st.integers(1, 40),
            st.sampled_from(["interactive", "default", "sheddable"]),
            st.booleans(),
        ),
        max_size=120,
    ),
    st.dictionaries(st.sampled_from(["x", "y", "z"]), st.floats(0.05, 20)),
)
def test_every_item_comes_out_once_and_each_tenant_band_in_its_order(
    steps: list[tuple[str, int, str, bool]], weights: dict[str, float]
) -> None:
    fair, clock = make(weights, budget=64, quantum=16)
    added: list[Item] = []
    out: list[Item] = []
    for n, (tenant, tokens, priority, take) in enumerate(steps):
        item = (tenant, str(n), tokens, priority)
        fair.add(item, tokens)
        added.append(item)
        if take:
            clock.advance_ms(7)
            out += [i for b in fair.take(idle=n % 3 == 0, room=n % 2 == 0) for i in b]
    while len(fair):
        out += [i for b in fair.take(idle=True, room=True) for i in b]
    assert sorted(out) == sorted(added) and len(out) == len(set(out))
    order: dict[tuple[str, str], list[str]] = defaultdict(list)
    for tenant, name, _, priority in out:
        order[tenant, priority].append(name)
    for names in order.values():
        assert names == sorted(names, key=int)


# --- through the core ------------------------------------------------------------------------


def test_through_the_core_a_quiet_tenant_is_not_queued_behind_a_flood() -> None:
    rig = Rig(max_batch_tokens=64, max_inflight_batches_per_bucket=1, fair_quantum_tokens=8)
    rig.workers()
    rig.read(*[rig.request(f"n{i}", tenant="noisy") for i in range(80)])
    [first] = of(ev.SendBatch, rig.tick())
    rig.read(rig.request("q1", tenant="quiet"), rig.request("q2", tenant="quiet"))
    rig.complete(first)
    [second] = of(ev.SendBatch, rig.tick())  # formed ahead, before the quiet requests came
    rig.complete(second)
    [third] = of(ev.SendBatch, rig.tick())
    assert {"q1", "q2"} <= set(ids(third))  # FIFO: the 10th batch, behind 72 noisy ones


def test_through_the_core_a_tenants_weight_comes_from_its_limits() -> None:
    rig = Rig(max_batch_tokens=64, fair_quantum_tokens=8)
    rig.workers()
    rig.handle(ev.LimitsSynced({}, {"gold": TenantLimits(weight=3.0)}))
    rig.read(*[rig.request(f"s{i}", tenant="plain") for i in range(40)])
    rig.read(*[rig.request(f"g{i}", tenant="gold") for i in range(40)])
    send = of(ev.SendBatch, rig.tick())[0]
    tenants = Counter(i[0] for i in ids(send))
    assert tenants == {"g": 6, "s": 2}


def test_without_fair_share_the_flood_goes_first() -> None:
    rig = Rig(max_batch_tokens=64, fair_share=False)
    rig.workers()
    rig.read(*[rig.request(f"n{i}", tenant="noisy") for i in range(16)])
    rig.read(rig.request("q1", tenant="quiet", priority="interactive"))
    sends = of(ev.SendBatch, rig.tick())
    assert [ids(s) for s in sends] == [[f"n{i}" for i in range(8)], [f"n{i}" for i in range(8, 16)]]
