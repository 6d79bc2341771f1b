"""The tests' one waiting helper: returns what the check found, retries only "not yet"."""

from __future__ import annotations

import itertools
import re

import pytest

from tests.eventually import eventually


def test_returns_the_first_truthy_answer_and_retries_failed_assertions() -> None:
    calls = itertools.count()

    def third_time() -> int:
        n = next(calls)
        assert n >= 1, "not yet"
        return n if n >= 2 else 0

    assert eventually(third_time, timeout_s=5, every_s=0.001) == 2


def test_names_what_never_came_and_chains_the_last_assertion() -> None:
    def never() -> bool:
        raise AssertionError("still 0 replies")

    with pytest.raises(AssertionError, match=re.escape("the replies: not within 0.05 s")) as raised:
        eventually(never, timeout_s=0.05, what="the replies", every_s=0.01)
    assert isinstance(raised.value.__cause__, AssertionError)


def test_any_other_error_fails_at_once() -> None:
    calls = itertools.count()

    def broken() -> bool:
        next(calls)
        raise KeyError("a bug, not a wait")

    with pytest.raises(KeyError):
        eventually(broken, timeout_s=5)
    assert next(calls) == 1
