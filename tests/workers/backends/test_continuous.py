"""The continuous decode loop on the TEST MODEL: rows of several callers share it, joining and
leaving at every step. Each row gets what static batching gives it; a short request that
arrives while a long one decodes finishes first; cancel, deltas and failures stay per caller.
(test_generation.py runs the backend's own tests on both paths.)"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from headrace.schemas.params import GenerateParams
from headrace.workers.backends.base import EncodedItem, Generated
from headrace.workers.backends.continuous import ContinuousDecoder
from headrace.workers.backends.generation import GenerationBackend
from tests.tiny_model import context_lm, load_test_lm

LONG, SHORT = 256, 16
# the batch rows that fill the loop in the preemption tests: long enough that an interactive
# row let in at once (~5 + join_every + SHORT steps) finishes far ahead of one that waits
FULL = 96


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[GenerationBackend, GenerationBackend]]:
    # the context-sensitive build: a row decoded with another row's cache gets other tokens
    model_dir = context_lm(tmp_path_factory.mktemp("lm"))
    static = load_test_lm(model_dir=model_dir)
    continuous = load_test_lm(continuous_rows=64, model_dir=model_dir)
    yield static, continuous
    continuous.close()


def _decoder(backend: GenerationBackend) -> ContinuousDecoder:
    assert backend.decoder is not None
    return backend.decoder


def _prompts(backend: GenerationBackend, count: int) -> list[EncodedItem]:
    texts = [" the water runs" * (1 + i % 7) + f" to mill {i}" for i in range(count)]
    return backend.encode(texts, [False] * count)


def _params(count: int) -> list[GenerateParams]:
    return [
        GenerateParams(
            max_tokens=LONG if i % 10 == 0 else SHORT,
            temperature=0.0 if i % 3 else 0.9,
            seed=i,
        )
        for i in range(count)
    ]


def test_the_models_next_token_here_depends_on_the_context_before_the_last_token(
    pair: tuple[GenerationBackend, GenerationBackend],
) -> None:
    # the premise of the comparisons below: a row given another row's cache would show (the
    # served test model gives these six prompts two different first tokens)
    static, _ = pair
    texts = [
        " the water runs to the mill",
        " stones grind the grain at the mill",
        " a sluice at the head of the mill",
        " requests arrive on topics and leave as batches for the mill",
        " the wheel turns the mill",
        " below the wheel the tailrace carries the water back to the mill",
    ]
    items = static.encode(texts, [False] * len(texts))
    assert len({i.ids[-1] for i in items}) == 1
    firsts = {static.generate([i], [GenerateParams(max_tokens=1)])[0].token_ids[0] for i in items}
    assert len(firsts) == len(texts)


def test_rows_from_many_callers_get_what_static_batching_gives_them(
    pair: tuple[GenerationBackend, GenerationBackend],
) -> None:
    static, continuous = pair
    items, params = _prompts(static, 30), _params(30)
    alone = [static.generate([i], [p])[0] for i, p in zip(items, params, strict=True)]
    got: dict[int, list[Generated]] = {}
    decoder = _decoder(continuous)
    steps_before, cpu_before, tokens_before = decoder.steps, decoder.cpu_s, decoder.tokens

    def call(k: int) -> None:  # six callers of five rows each, arriving while others decode
        got[k] = continuous.generate(items[k * 5 : k * 5 + 5], params[k * 5 : k * 5 + 5])

    threads = [threading.Thread(target=call, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    together = [g for k in range(6) for g in got[k]]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert [g.finish_reason for g in together] == [g.finish_reason for g in alone]
    assert decoder.most_rows > 5  # rows of several callers decoded in one step
    # one loop for all: far fewer steps than the rows' tokens one caller at a time
    assert decoder.steps - steps_before < sum(g.completion_tokens for g in alone) / 2
    assert decoder.cpu_s > cpu_before  # the loop's thread counts what its steps cost
    # every output token counted once (what a bench's tokens/s over a window reads)
    assert decoder.tokens - tokens_before == sum(g.completion_tokens for g in together)
    assert decoder.waiting == 0


def test_rows_done_at_their_first_token_leave_and_the_rest_keep_their_cache_rows(
    pair: tuple[GenerationBackend, GenerationBackend],
) -> None:
    static, continuous = pair
    # one caller, short prompts: prefilled together; rows 0 and 2 end at the token the
    # prefill gives them, so the prefill's cache keeps only rows 1 and 3 for decoding: kept
    # in the wrong order, each would decode on the other's cache and get other tokens
    texts = [" the water runs", " a cold wind over the hills", " mill", " seven red boats sail"]
    items = static.encode(texts, [False] * 4)
    params = [
        GenerateParams(max_tokens=1 if i % 2 == 0 else 12, temperature=0.9, seed=i)
        for i in range(4)
    ]
    alone = [static.generate([i], [p])[0] for i, p in zip(items, params, strict=True)]
    together = continuous.generate(items, params)
    assert [g.completion_tokens for g in together] == [1, 12, 1, 12]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]


def test_rows_of_very_different_lengths_prefill_apart_and_keep_their_tokens(
    pair: tuple[GenerationBackend, GenerationBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    static, continuous = pair
    texts = [f"the weir {i}" for i in range(6)] + [
        " the headrace carries the water to the wheel" * 12 + f" {i}" for i in range(6)
    ]
    items = static.encode(texts, [False] * len(texts))
    params = [GenerateParams(max_tokens=8) for _ in texts]
    alone = [static.generate([i], [p])[0] for i, p in zip(items, params, strict=True)]
    decoder = _decoder(continuous)
    passes: list[list[int]] = []
    real = decoder._prefill

    def prefill(group: list[tuple[Any, int]]) -> None:
        passes.append([len(job.prompts[i]) for job, i in group])
        real(group)

    monkeypatch.setattr(decoder, "_prefill", prefill)
    together = continuous.generate(items, params)
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert len(passes) == 2  # the six long prompts first, then the six short ones
    assert min(passes[0]) > 10 * max(passes[1])
    # where a pass costs more than the padding (a GPU's launches), they prefill together
    passes.clear()
    monkeypatch.setattr(decoder, "prefill_overhead_tokens", 8192)
    together = continuous.generate(items, params)
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert len(passes) == 1 and len(passes[0]) == 12


def test_a_short_request_arriving_during_a_long_one_finishes_first(
    pair: tuple[GenerationBackend, GenerationBackend],
) -> None:
    _, continuous = pair
    decoder = _decoder(continuous)
    [long_item, short_item] = _prompts(continuous, 2)
    started = decoder.steps
    asked_at: dict[str, int] = {}
    finished_at: dict[str, int] = {}
    out: dict[str, Generated] = {}

    def run(name: str, item: EncodedItem, max_tokens: int) -> None:
        asked_at[name] = decoder.steps
        [out[name]] = continuous.generate([item], [GenerateParams(max_tokens=max_tokens)])
        finished_at[name] = decoder.steps

    long = threading.Thread(target=run, args=("long", long_item, LONG))
    long.start()
    while decoder.steps < started + 5:  # the long row is decoding
        assert long.is_alive()
    run("short", short_item, SHORT)
    long.join(120)
    assert out["long"].completion_tokens == LONG, "the test model must not stop early here"
    assert out["short"].completion_tokens == SHORT
    assert finished_at["short"] < finished_at["long"]
    # it joined at once: its own steps, a join that comes every join_every steps, and a few
    # a thread starved on a loaded machine sees pass (CI: 5 once), not the long row's 256
    assert finished_at["short"] - asked_at["short"] <= SHORT + decoder.cadence.join_every + 12


def test_cancel_and_deltas_stay_with_their_caller(
    pair: tuple[GenerationBackend, GenerationBackend],
) -> None:
    _, continuous = pair
    items = _prompts(continuous, 4)
    asked = [GenerateParams(max_tokens=LONG)] * 4
    deltas: dict[int, list[str]] = {i: [] for i in range(4)}

    def cancelled() -> set[int]:
        return {1} if deltas[1] else set()  # row 1 is cancelled once it is under way

    decoder = _decoder(continuous)
    decoder.cancel_check_s = 0.005
    try:
        outs = continuous.generate(
            items, asked, on_delta=lambda row, text: deltas[row].append(text), cancelled=cancelled
        )
    finally:
        decoder.cancel_check_s = continuous.cancel_check_s
    assert outs[1].finish_reason == "abort" and outs[1].completion_tokens < LONG
    assert [o.finish_reason for i, o in enumerate(outs) if i != 1] == ["length"] * 3
    assert all("".join(deltas[i]) == outs[i].text for i in range(4))


class _Failing:
    """The model, failing any forward pass whose input holds ``bad`` (once armed)."""

    def __init__(self, model: Any, bad: int) -> None:
        self.model, self.bad, self.armed = model, bad, True

    def __call__(self, **kwargs: Any) -> Any:
        if self.armed and bool((kwargs["input_ids"] == self.bad).any()):
            raise RuntimeError("injected model failure")
        return self.model(**kwargs)


def test_a_failed_step_fails_the_callers_in_it_and_the_loop_goes_on(
    pair: tuple[GenerationBackend, GenerationBackend],
) -> None:
    _, continuous = pair
    decoder = _decoder(continuous)
    items = _prompts(continuous, 3)
    bad = items[2].ids[-1]
    failing = _Failing(decoder.model, bad)
    decoder.model = failing
    try:
        with pytest.raises(RuntimeError, match="injected"):
            continuous.generate(items[2:], [GenerateParams(max_tokens=SHORT)])
        failing.armed = False
        [ok] = continuous.generate(items[:1], [GenerateParams(max_tokens=SHORT)])
        assert ok.completion_tokens == SHORT
    finally:
        decoder.model = failing.model


def test_rows_join_only_while_the_kv_cache_holds_them_and_the_rest_wait(
    pair: tuple[GenerationBackend, GenerationBackend],
) -> None:
    """KV-cache admission (issue 35 item 2): with room for three rows at their longest,
    twelve rows from four callers run at most three at a time, the others waiting in order,
    and each gets what it gets alone."""
    static, continuous = pair
    items = _prompts(static, 12)
    params = [GenerateParams(max_tokens=SHORT, seed=i) for i in range(12)]
    alone = [static.generate([i], [p])[0] for i, p in zip(items, params, strict=True)]
    decoder = _decoder(continuous)
    longest = max(min(len(i.ids) + SHORT, decoder.context) for i in items)
    got: dict[int, list[Generated]] = {}

    def call(k: int) -> None:
        got[k] = continuous.generate(items[k * 3 : k * 3 + 3], params[k * 3 : k * 3 + 3])

    decoder.kv_tokens, decoder.most_rows = 3 * longest, 0
    try:
        threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        decoder.kv_tokens = None
    assert [g.token_ids for k in range(4) for g in got[k]] == [g.token_ids for g in alone]
    assert 1 < decoder.most_rows <= 3


def test_each_row_is_charged_its_share_of_the_passes_it_was_in_and_the_charges_add_up(
    pair: tuple[GenerationBackend, GenerationBackend],
) -> None:
    """Cost is device time (issue 37 item 6): six callers' batches overlap in the one loop;
    each row is charged its share of every pass it was in, so the charges add up to the
    loop's measured time (within 5%), not to each batch's wall time once per batch."""
    _, continuous = pair
    items, params = _prompts(continuous, 30), _params(30)
    decoder = _decoder(continuous)
    got: dict[int, list[Generated]] = {}

    def call(k: int) -> None:
        got[k] = continuous.generate(items[k * 5 : k * 5 + 5], params[k * 5 : k * 5 + 5])

    passes_before, began = decoder.pass_s, time.perf_counter()
    threads = [threading.Thread(target=call, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    wall_s = time.perf_counter() - began
    charges = [g.device_ms for k in range(6) for g in got[k]]
    assert all(c is not None and c > 0 for c in charges)
    charged_s = sum(c for c in charges if c is not None) / 1000
    loop_s = decoder.pass_s - passes_before
    assert charged_s == pytest.approx(loop_s, rel=0.05)
    assert charged_s <= wall_s  # each batch's wall time once per batch would be ~6x more


@pytest.fixture(scope="module", params=["left-padded", "slots"])
def four_rows(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GenerationBackend]:
    """A loop of four rows (the same context-sensitive build), to be filled; its rows in one
    left-padded cache or on four slots (a preempted row's slot is freed, its resumption
    prefilled into another)."""
    backend = load_test_lm(
        continuous_rows=4,
        model_dir=context_lm(tmp_path_factory.mktemp("lm")),
        slots=request.param == "slots",
    )
    yield backend
    backend.close()


def _ranked(items: list[EncodedItem], rank: int) -> list[EncodedItem]:
    return [dataclasses.replace(item, rank=rank) for item in items]


def _full_then_interactive(
    backend: GenerationBackend, static: GenerationBackend
) -> tuple[dict[str, list[Generated]], dict[str, int], dict[int, list[str]], list[Generated]]:
    """Four batch-class rows of FULL tokens fill the loop; an interactive row of SHORT comes
    once they decode. What each caller got, the step each finished at, the batch rows'
    deltas, and what the batch rows get decoded alone."""
    decoder = _decoder(backend)
    items = _prompts(backend, 5)
    batch_items, [fast] = _ranked(items[:4], 2), _ranked(items[4:], 0)
    alone = [static.generate([i], [GenerateParams(max_tokens=FULL)])[0] for i in batch_items]
    out: dict[str, list[Generated]] = {}
    finished_at: dict[str, int] = {}
    deltas: dict[int, list[str]] = {i: [] for i in range(4)}
    started = decoder.steps

    def batch() -> None:
        out["batch"] = backend.generate(
            batch_items,
            [GenerateParams(max_tokens=FULL)] * 4,
            on_delta=lambda row, text: deltas[row].append(text),
        )
        finished_at["batch"] = decoder.steps

    thread = threading.Thread(target=batch)
    thread.start()
    while decoder.steps < started + 5:  # the four rows are decoding: the loop is full
        assert thread.is_alive()
    out["interactive"] = backend.generate([fast], [GenerateParams(max_tokens=SHORT)])
    finished_at["interactive"] = decoder.steps
    thread.join(120)
    return out, {k: v - started for k, v in finished_at.items()}, deltas, alone


def test_an_interactive_row_preempts_a_batch_row_of_a_full_loop_which_resumes_intact(
    pair: tuple[GenerationBackend, GenerationBackend], four_rows: GenerationBackend
) -> None:
    static, _ = pair
    decoder = _decoder(four_rows)
    preempted = decoder.preempted
    _preempted_one_which_resumed_intact(
        decoder, preempted, *_full_then_interactive(four_rows, static)
    )


def _preempted_one_which_resumed_intact(
    decoder: ContinuousDecoder,
    preempted: int,
    out: dict[str, list[Generated]],
    finished_at: dict[str, int],
    deltas: dict[int, list[str]],
    alone: list[Generated],
) -> None:
    assert decoder.preempted - preempted == 1  # one place for one row
    assert out["interactive"][0].completion_tokens == SHORT
    # it went in at once
    assert finished_at["interactive"] <= 5 + decoder.cadence.join_every + SHORT + 2
    assert finished_at["interactive"] < finished_at["batch"]
    # the preempted row resumed by recompute: the same tokens as alone, its stream in order
    assert [g.token_ids for g in out["batch"]] == [g.token_ids for g in alone]
    assert all("".join(deltas[i]) == out["batch"][i].text for i in range(4))


def test_an_interactive_row_the_kv_cache_cannot_hold_preempts_with_places_to_spare(
    pair: tuple[GenerationBackend, GenerationBackend],
) -> None:
    """Preemption by memory: a loop of 64 places whose KV room holds the four batch rows at
    their longest and no fifth row. The interactive row takes one batch row's room."""
    static, continuous = pair
    decoder = _decoder(continuous)
    batch_items = _prompts(continuous, 5)[:4]
    decoder.kv_tokens = 4 * max(min(len(i.ids) + FULL, decoder.context) for i in batch_items)
    preempted = decoder.preempted
    try:
        ran = _full_then_interactive(continuous, static)
    finally:
        decoder.kv_tokens = None
    assert decoder.max_rows > 5  # places to spare: only memory was short
    _preempted_one_which_resumed_intact(decoder, preempted, *ran)


def test_without_preemption_the_interactive_row_waits_for_a_place(
    pair: tuple[GenerationBackend, GenerationBackend], four_rows: GenerationBackend
) -> None:
    static, _ = pair
    decoder = _decoder(four_rows)
    decoder.preempt = False
    try:
        out, finished_at, _, _ = _full_then_interactive(four_rows, static)
    finally:
        decoder.preempt = True
    assert out["interactive"][0].completion_tokens == SHORT
    assert finished_at["interactive"] > FULL  # behind a row of FULL tokens
