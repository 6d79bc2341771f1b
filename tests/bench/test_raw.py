"""The raw loops' split of batches between processes (pure)."""

from __future__ import annotations

from bench.raw import split


def test_split_keeps_every_batch_once_and_balances_the_cost() -> None:
    groups = [["x" * 100] * 8, ["x" * 10] * 40, ["x" * 50] * 4, ["y" * 5] * 10, ["z" * 200]]
    parts = split(groups, 2)
    assert sorted(map(repr, (g for part in parts for g in part))) == sorted(map(repr, groups))
    costs = [sum(len(g) * max(map(len, g)) for g in part) for part in parts]
    assert costs == [850, 800]  # greedy, largest first: 800 + 50 | 400 + 200 + 200


def test_split_into_one_is_the_whole() -> None:
    groups = [["a"], ["bb", "c"]]
    assert split(groups, 1) == [sorted(groups, key=lambda g: -len(g) * max(map(len, g)))]
