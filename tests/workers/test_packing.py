"""Padding math (pure): cuts where the padding saved passes a batch's overhead, and rows
grouped by length so."""

from __future__ import annotations

from headrace.workers.packing import by_length, cut_points


def test_cuts_go_where_the_padding_saved_passes_the_overhead() -> None:
    assert cut_points([10], [50], overhead_tokens=64) == [0]
    # 100 rows of 5 and 100 of 16: one batch pads 1,100 tokens, two cost 64 more: cut
    assert cut_points([5, 16], [100, 100], overhead_tokens=64) == [0, 1]
    # 2 rows of 5 and 2 of 16: cutting saves 22 tokens, less than a batch costs: no cut
    assert cut_points([5, 16], [2, 2], overhead_tokens=64) == [0]


def test_joining_rows_are_grouped_by_length_where_the_padding_saved_is_worth_a_pass() -> None:
    names, lengths = ["a", "b", "c", "d", "e"], [3, 40, 4, 41, 3]
    # longest group first, longest row first in each
    assert by_length(names, lengths, overhead=8) == [["d", "b"], ["c", "e", "a"]]
    # a pass that costs more than the padding it saves: one group
    assert by_length(names, lengths, overhead=500) == [["d", "b", "c", "e", "a"]]
    assert by_length([], [], overhead=8) == []
