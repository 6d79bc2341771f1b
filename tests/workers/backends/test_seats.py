"""The continuous loop's room as policy (``seats.py``): what fits, and which running rows
give way to better-classed waiting ones, by place and by KV memory."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from headrace.workers.backends.seats import Seat, fits, kv_fits, to_preempt

INTERACTIVE, DEFAULT, BATCH = 0, 1, 2


def test_kv_fits_counts_every_row_at_the_longest() -> None:
    assert kv_fits(3, 100, 300) and not kv_fits(4, 100, 300)
    assert kv_fits(10_000, 10_000, None)  # no budget: rows only bound it


def test_one_row_alone_always_fits() -> None:
    assert fits(1, 10_000, max_rows=4, kv_tokens=100)
    assert not fits(2, 60, max_rows=4, kv_tokens=100) and fits(2, 50, max_rows=4, kv_tokens=100)
    assert not fits(5, 1, max_rows=4, kv_tokens=None)


def test_a_full_loop_gives_one_place_to_one_better_row_the_newest_worst_first() -> None:
    running = [Seat(BATCH, 100, held=50), Seat(BATCH, 100, held=10), Seat(DEFAULT, 100, held=5)]
    assert to_preempt(running, [Seat(INTERACTIVE, 100)], max_rows=3, kv_tokens=None) == [1]


def test_rows_with_room_left_join_without_anyone_leaving() -> None:
    running = [Seat(BATCH, 100)]
    assert to_preempt(running, [Seat(INTERACTIVE, 100)] * 2, max_rows=3, kv_tokens=None) == []


def test_a_row_the_kv_cache_cannot_hold_takes_the_room_of_worse_rows_with_places_to_spare() -> None:
    """Eight places, room for 1,000 KV tokens: four batch rows of 200 fill it by memory,
    not by count. An interactive row of 300 needs every row at 300: with two rows gone,
    3 x 300 = 900 fits."""
    running = [Seat(BATCH, 200, held=h) for h in (40, 30, 20, 10)]
    gone = to_preempt(running, [Seat(INTERACTIVE, 300)], max_rows=8, kv_tokens=1000)
    assert gone == [3, 2]  # the two holding least
    assert fits(4 - len(gone) + 1, 300, max_rows=8, kv_tokens=1000)


def test_a_long_running_row_leaving_shrinks_the_longest() -> None:
    """The batch is padded to its longest row: moving the long one out makes room for two."""
    running = [Seat(DEFAULT, 100), Seat(BATCH, 900, held=5)]
    assert to_preempt(running, [Seat(INTERACTIVE, 100)], max_rows=8, kv_tokens=1000) == [1]


def test_no_row_gives_way_to_its_own_class_or_a_worse_one() -> None:
    running = [Seat(DEFAULT, 500), Seat(DEFAULT, 500)]
    for rank in (DEFAULT, BATCH):
        assert to_preempt(running, [Seat(rank, 500)], max_rows=8, kv_tokens=1000) == []


def test_finished_rows_are_not_moved_out() -> None:
    running = [Seat(BATCH, 500, movable=False), Seat(BATCH, 500, held=9)]
    assert to_preempt(running, [Seat(INTERACTIVE, 500)], max_rows=8, kv_tokens=1000) == [1]


def test_nobody_is_moved_out_for_a_row_that_still_would_not_fit() -> None:
    """An interactive row beside interactive rows that fill the cache: moving the one batch
    row out would not make room, so it stays."""
    running = [Seat(INTERACTIVE, 400), Seat(INTERACTIVE, 400), Seat(BATCH, 100)]
    assert to_preempt(running, [Seat(INTERACTIVE, 400)], max_rows=8, kv_tokens=1000) == []


def test_it_stops_at_the_first_waiting_row_that_cannot_join() -> None:
    """Waiting rows join in their order: the default row behind the interactive one would need
    the running default row's room, which it may not take; the batch row behind it gets
    nothing either."""
    running = [Seat(DEFAULT, 300), Seat(BATCH, 300, held=1)]
    waiting = [Seat(INTERACTIVE, 300), Seat(DEFAULT, 300), Seat(BATCH, 10)]
    assert to_preempt(running, waiting, max_rows=8, kv_tokens=600) == [1]


seats = st.builds(
    Seat,
    rank=st.integers(0, 3),
    need=st.integers(1, 500),
    held=st.integers(0, 50),
    movable=st.booleans(),
)


@given(
    running=st.lists(seats, max_size=10),
    waiting=st.lists(seats, max_size=10),
    max_rows=st.integers(1, 10),
    kv_tokens=st.one_of(st.none(), st.integers(1, 3000)),
)
def test_rows_move_out_only_for_better_rows_and_only_movable_ones(
    running: list[Seat], waiting: list[Seat], max_rows: int, kv_tokens: int | None
) -> None:
    waiting = sorted(waiting, key=lambda seat: seat.rank)  # the loop's waiting order
    gone = to_preempt(running, waiting, max_rows, kv_tokens)
    assert len(set(gone)) == len(gone) and all(running[k].movable for k in gone)
    if gone:
        assert max(running[k].rank for k in gone) > waiting[0].rank
        # after they leave, the first waiting row fits
        staying = [s for k, s in enumerate(running) if k not in set(gone)]
        longest = max([s.need for s in staying] + [waiting[0].need])
        assert fits(len(staying) + 1, longest, max_rows, kv_tokens)
