"""What the memory plan sets on a loaded backend: a continuous decoder's KV room."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from headrace.workers.backends.base import ModelBackend
from headrace.workers.faults import FaultyBackend
from headrace.workers.startup import admit_by_plan


def backend_with(decoder: object | None) -> ModelBackend:
    return cast(ModelBackend, SimpleNamespace(decoder=decoder))


def test_a_continuous_decoder_takes_the_plan_s_kv_room_and_nothing_else_changes() -> None:
    decoder = SimpleNamespace(kv_tokens=None)
    assert admit_by_plan(backend_with(decoder), {"kv_tokens": 40_000}) == 40_000
    assert decoder.kv_tokens == 40_000
    wrapped = cast(ModelBackend, FaultyBackend(backend_with(decoder)))  # fault injection's
    assert admit_by_plan(wrapped, {"kv_tokens": 9_000}) == 9_000 and decoder.kv_tokens == 9_000
    plans: list[dict[str, Any]] = [{"error": "no config.json"}, {"kv_tokens": 0}, {}]
    for plan in plans:  # no figure: the decoder keeps what it had
        assert admit_by_plan(backend_with(decoder), plan) is None
    assert decoder.kv_tokens == 9_000
    assert admit_by_plan(backend_with(None), {"kv_tokens": 40_000}) is None  # static, encoders
