"""The fault-injection wrapper fails marked inputs of any backend, embedding or generation
(the crash marker ends the process, which the fault suite covers)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from headrace.models import tiny_lm
from headrace.models.registry import model_spec
from headrace.workers.backends.base import FixedSampling
from headrace.workers.backends.echo import EchoBackend
from headrace.workers.backends.generation import GenerationBackend
from headrace.workers.faults import FaultyBackend, InjectedFault


def test_poison_fails_an_embedding_batch_holding_it_and_no_other() -> None:
    spec = model_spec("all-MiniLM-L6-v2")
    faulty = FaultyBackend(EchoBackend(spec.name, spec.path, spec.max_tokens), poison="<<p>>")
    faulty.load_weights()
    items = faulty.encode(["fine", "bad <<p>>"], [False, False])
    with pytest.raises(InjectedFault):
        faulty.embed(items, [True, True])
    vectors, _, _ = faulty.embed(items[:1], [True])
    assert len(vectors) == 1


def test_poison_and_slow_reach_a_generation_backend(tmp_path: Path) -> None:
    model_dir = tiny_lm.ensure(tmp_path)
    inner = GenerationBackend(tiny_lm.NAME, model_dir, tiny_lm.MAX_POSITIONS, device="cpu")
    faulty = FaultyBackend(inner, poison="<<p>>", slow="<<s>>", slow_s=0.3)
    faulty.load_weights()
    faulty.build()
    assert faulty.task == "generate"
    items = faulty.encode(["The headrace <<p>>", "A sluice"], [False, False])
    greedy = [FixedSampling(max_tokens=3)] * 2
    with pytest.raises(InjectedFault):
        faulty.generate(items, greedy)
    [out] = faulty.generate(items[1:], greedy[:1])
    assert out.completion_tokens == 3
    slow = faulty.encode(["The headrace <<s>>"], [False])
    started = time.monotonic()
    faulty.generate(slow, greedy[:1])
    assert time.monotonic() - started >= 0.3


def test_stall_holds_a_forward_pass_open_on_the_inner_backend_s_pulse(tmp_path: Path) -> None:
    """What the worker's stall watch sees of a hung model: a pass under way that never ends
    (the stalled thread is a daemon; it waits until the test process exits)."""
    model_dir = tiny_lm.ensure(tmp_path)
    inner = GenerationBackend(tiny_lm.NAME, model_dir, tiny_lm.MAX_POSITIONS, device="cpu")
    faulty = FaultyBackend(inner, stall="<<h>>")
    faulty.load_weights()
    faulty.build()
    assert faulty.pulse is inner.pulse
    greedy = [FixedSampling(max_tokens=2)]
    faulty.generate(faulty.encode(["A sluice"], [False]), greedy)
    running, ended = inner.pulse.read()
    assert running == 0 and ended >= 2
    hung = faulty.encode(["The headrace <<h>>"], [False])
    threading.Thread(target=faulty.generate, args=(hung, greedy), daemon=True).start()
    deadline = time.monotonic() + 5
    while inner.pulse.read()[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert inner.pulse.read() == (1, ended)
