"""The dispatcher's packer (pure, injected clock): a bucket's waiting requests sorted by
length and cut where padding plus a batch's overhead is least; every request in exactly one
batch, within the token budget and the row cap; a lone request goes at once to an idle
worker."""

from __future__ import annotations

import random

from headrace.workers.dispatcher.batcher import DynamicBatcher
from headrace.workers.dispatcher.packer import PackingBatcher
from tests.clock import FakeClock


def efficiency(batches: list[list[int]]) -> float:
    real = sum(sum(b) for b in batches)
    return real / sum(len(b) * max(b) for b in batches)


def long_tail_bucket(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(5, 16) for _ in range(n)]


def test_a_mixed_bucket_packs_far_tighter_than_arrival_order() -> None:
    lengths = long_tail_bucket(240, seed=1)
    clock = FakeClock()
    packer: PackingBatcher[int] = PackingBatcher(4096, 20, clock, overhead_tokens=64)
    arrival: DynamicBatcher[int] = DynamicBatcher(4096, 20, clock)
    packed: list[list[int]] = []
    plain: list[list[int]] = []
    for n in lengths:
        packed += packer.add(n, n)
        plain += arrival.add(n, n)
    clock.advance_ms(20)
    packed += packer.flush()
    plain += arrival.flush()
    assert sorted(x for b in packed for x in b) == sorted(lengths)
    assert all(len(b) * max(b) <= 4096 for b in packed)
    print(
        f"240 rows of 5-16 tokens: packed {efficiency(packed):.3f} in {len(packed)} batches, "
        f"arrival order {efficiency(plain):.3f} in {len(plain)}"
    )
    assert efficiency(packed) > 0.93 and efficiency(plain) < 0.7


def test_a_lone_request_goes_at_once_to_an_idle_worker_and_else_at_max_wait() -> None:
    clock = FakeClock()
    packer: PackingBatcher[str] = PackingBatcher(4096, 20, clock)
    assert packer.add("r1", 10) == []
    assert packer.flush(idle=True) == [["r1"]]
    packer.add("r2", 10)
    clock.advance_ms(19)
    assert packer.flush() == [] and packer.seconds_until_due() is not None
    clock.advance_ms(1)
    assert packer.flush() == [["r2"]] and len(packer) == 0


def test_a_full_window_sends_all_but_the_longest_part() -> None:
    clock = FakeClock()
    packer: PackingBatcher[int] = PackingBatcher(32, 20, clock, overhead_tokens=0, window=2)
    sent: list[list[int]] = []
    added = 0
    while not sent:  # 4 and 8 tokens in turn, until the pool holds 2 x 32 tokens
        n = 4 if added % 2 == 0 else 8
        sent = packer.add(n, n)
        added += 1
    assert sum(4 if i % 2 == 0 else 8 for i in range(added)) >= 64
    assert all(len(b) * max(b) <= 32 for b in sent)
    kept = len(packer)
    assert kept and sum(len(b) for b in sent) + kept == added
    assert max(x for b in sent for x in b) <= 8 and sent[0][0] == 4  # shortest first
    clock.advance_ms(20)
    assert sum(len(b) for b in packer.flush()) == kept and len(packer) == 0


def test_the_row_cap_and_drain_hold() -> None:
    clock = FakeClock()
    packer: PackingBatcher[int] = PackingBatcher(10_000, 20, clock)
    packer.max_rows = 3
    for i in range(5):
        packer.add(i, 10)
    dropped = packer.drain(lambda i: i % 2 == 0)
    assert dropped == [1, 3] and len(packer) == 3
    assert packer.flush(idle=True) == [[0, 2, 4]]
    sent = []
    for i in range(7):
        sent += packer.add(i, 10)  # 2 x 3 rows wait: the window is full
    sent += packer.flush(idle=True)
    assert [len(b) for b in sent] == [3, 3, 1]


def test_every_item_lands_once_within_budget_whatever_the_mix() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        clock = FakeClock()
        packer: PackingBatcher[tuple[int, int]] = PackingBatcher(
            rng.choice([64, 256, 4096]), 20, clock, overhead_tokens=rng.choice([0, 16, 64])
        )
        items = [(i, rng.randint(1, 60)) for i in range(rng.randint(1, 300))]
        out: list[list[tuple[int, int]]] = []
        for item in items:
            out += packer.add(item, item[1])
            if rng.random() < 0.05:
                clock.advance_ms(25)
                out += packer.flush()
        out += packer.flush(idle=True)
        assert sorted(x for b in out for x in b) == sorted(items)
        assert all(
            len(b) * max(t for _, t in b) <= packer.max_batch_tokens or len(b) == 1 for b in out
        )
