"""The n choices of a streamed completion merged as they come (``completions._merged``): each
event with its choice's index; an error in one ends them all; a reader that leaves closes
every choice's stream (each one's ``finally`` runs: that is where its request is cancelled)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from headrace.gateway.completions import _firsts, _merged
from headrace.schemas.messages import GenerationResult

Event = str | GenerationResult


def choice(name: str, pieces: int, closed: list[str], fail: bool = False) -> AsyncIterator[Event]:
    async def events() -> AsyncIterator[Event]:
        try:
            for i in range(pieces):
                await asyncio.sleep(0.001)
                yield f"{name}{i}"
            if fail:
                raise ValueError(f"{name} failed")
        finally:
            closed.append(name)

    return events()


def test_every_event_comes_once_with_its_index() -> None:
    closed: list[str] = []

    async def read() -> list[tuple[int, Event]]:
        streams = [choice("a", 3, closed), choice("b", 2, closed)]
        return [pair async for pair in _merged(streams)]

    got = asyncio.run(read())
    assert sorted(got) == [(0, "a0"), (0, "a1"), (0, "a2"), (1, "b0"), (1, "b1")]
    assert [e for i, e in got if i == 0] == ["a0", "a1", "a2"]  # each choice in order
    assert sorted(closed) == ["a", "b"]


def test_an_error_in_one_choice_ends_them_all() -> None:
    closed: list[str] = []

    async def read() -> None:
        streams = [choice("a", 1, closed, fail=True), choice("b", 1000, closed)]
        async for _ in _merged(streams):
            pass

    with pytest.raises(ValueError, match="a failed"):
        asyncio.run(read())
    assert sorted(closed) == ["a", "b"]  # b, still running, was cancelled and closed


def test_a_reader_that_leaves_closes_every_choice() -> None:
    closed: list[str] = []

    async def read_two_then_leave() -> None:
        merged = _merged([choice("a", 1000, closed), choice("b", 1000, closed)])
        seen = 0
        async for _ in merged:
            seen += 1
            if seen == 2:
                break
        await merged.aclose()  # what the gateway does when its client disconnects

    asyncio.run(read_two_then_leave())
    assert sorted(closed) == ["a", "b"]


def test_a_choice_that_fails_before_its_first_event_fails_the_call_and_closes_the_rest() -> None:
    closed: list[str] = []

    def broken() -> AsyncIterator[Event]:
        async def events() -> AsyncIterator[Event]:
            try:
                raise ValueError("unknown model")
                yield "never"  # an async generator
            finally:
                closed.append("broken")

        return events()

    async def start() -> None:
        await _firsts([broken(), choice("slow", 1000, closed)])

    with pytest.raises(ValueError, match="unknown model"):
        asyncio.run(start())
    assert sorted(closed) == ["broken", "slow"]  # no 'already running' on the way
