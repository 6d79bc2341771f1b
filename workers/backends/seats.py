"""Room in the continuous decode loop, as policy: whether rows fit, and which running rows
give their place up to better-classed waiting ones (preemption). No tensors and no model:
the loop (``continuous.py``) describes its rows as ``Seat``s and carries the answer out.

A row fits when the loop runs at most ``max_rows`` rows and the KV cache's room
(``kv_tokens``) holds every row at the longest any of them may grow to (the running batch
keeps its rows padded to one length). One row alone always fits: it runs, whatever its size.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Seat:
    """A row as the loop's room sees it. ``rank``: its class (0 interactive, 1 default, 2 and
    up batch and sheddable: lower is better); ``need``: the KV tokens it may come to hold (its
    prompt and all it may generate, within the context); ``held``: the tokens it holds now (a
    preempted row loses the decoding they cost); ``movable``: False for a row that finished
    and leaves anyway."""

    rank: int
    need: int
    held: int = 0
    movable: bool = True


def kv_fits(rows: int, longest: int, kv_tokens: int | None) -> bool:
    """Whether ``rows`` rows fit in ``kv_tokens`` of KV cache when each may grow to the
    longest's length. ``None``: no budget, only the row count bounds them."""
    return kv_tokens is None or rows * longest <= kv_tokens


def fits(rows: int, longest: int, max_rows: int, kv_tokens: int | None) -> bool:
    """Whether ``rows`` rows, the longest of which may grow to ``longest`` tokens, may run."""
    return rows <= 1 or (rows <= max_rows and kv_fits(rows, longest, kv_tokens))


def to_preempt(
    running: Sequence[Seat], waiting: Iterable[Seat], max_rows: int, kv_tokens: int | None
) -> list[int]:
    """Which running rows leave (their indices, in the order they leave) so that the waiting
    rows, taken in their order, may join: a waiting row that does not fit (no place, or no KV
    room for it at its longest) takes the room of running rows of a worse class, the worst
    class first and in it the row holding the fewest tokens (the least decoding lost). It
    stops at the first waiting row that would not fit even then, or whose class is no better
    than every row it could displace; rows are never moved out for a row that would still not
    fit."""
    staying = {k: seat.need for k, seat in enumerate(running)}
    victims = sorted(
        (k for k, seat in enumerate(running) if seat.movable),
        key=lambda k: (-running[k].rank, running[k].held),
    )
    joined: list[int] = []  # the needs of the waiting rows that join in this plan
    longest = max(staying.values(), default=0)
    chosen: list[int] = []
    for seat in waiting:
        taken: list[int] = []  # victims[:len(taken)], moved out for this row
        longest_now = max(longest, seat.need)
        while not fits(
            len(staying) - len(taken) + len(joined) + 1, longest_now, max_rows, kv_tokens
        ):
            if len(taken) == len(victims) or running[victims[len(taken)]].rank <= seat.rank:
                return chosen  # nobody (more) may give way to it: it waits, as all after it
            taken.append(victims[len(taken)])
            left = [need for k, need in staying.items() if k not in taken]
            longest_now = max([*left, *joined, seat.need])
        for k in taken:
            del staying[k]
        chosen += taken
        del victims[: len(taken)]
        joined.append(seat.need)
        longest = longest_now
    return chosen
