"""The transformers generation backend on the locally built TEST MODEL (headrace-test-lm:
random weights, gibberish text). Batched, left-padded decoding must give each row what the
model gives that prompt alone; seeds make sampling independent of batch-mates; stop
sequences, max_tokens and the context limit end rows; streamed deltas add up to the text.
Each holds for static batching and for the continuous decode loop (test_continuous.py), the
loop's rows in one left-padded cache or on fixed slots (test_slot_cache.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from headrace.models import tiny_lm
from headrace.schemas.params import GenerateParams
from headrace.workers.backends.base import default_shapes
from headrace.workers.backends.generation import GenerationBackend

PROMPTS = [
    "The headrace",
    "Water leaves the river at the weir and runs along",
    "A sluice",
    "Requests arrive on topics, wait in buckets of similar length",
]


@pytest.fixture(scope="module", params=["static", "continuous", "slots"])
def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GenerationBackend]:
    model_dir = tiny_lm.ensure(tmp_path_factory.mktemp("state"))
    b = GenerationBackend(
        tiny_lm.NAME,
        model_dir,
        max_tokens=tiny_lm.MAX_POSITIONS,
        device="cpu",
        continuous_rows=None if request.param == "static" else 16,
        slots=request.param == "slots",  # the continuous loop on a GPU's layout, eagerly
    )
    b.load_weights()
    b.build()
    assert b.continuous == (request.param != "static")
    b.warm_up(default_shapes([16, 64], rows=2))
    yield b
    b.close()


def test_batched_greedy_rows_match_the_model_alone(backend: GenerationBackend) -> None:
    items = backend.encode(PROMPTS, [False] * len(PROMPTS))
    params = [GenerateParams(max_tokens=12)] * len(PROMPTS)
    batched = backend.generate(items, params)
    for item, out in zip(items, batched, strict=True):
        alone = backend._model.generate(
            torch.tensor([item.ids]),
            attention_mask=torch.ones(1, len(item.ids), dtype=torch.long),
            max_new_tokens=12,
            do_sample=False,
            pad_token_id=backend.pad_id,
        )[0, len(item.ids) :].tolist()
        alone = alone[: alone.index(backend.eos_id)] if backend.eos_id in alone else alone
        assert out.token_ids == alone
        assert out.prompt_tokens == len(item.ids)
        assert out.text == backend.tokenizer.decode(alone, skip_special_tokens=True)
    assert backend.generate(items, params) == batched  # greedy is deterministic


def test_seeded_sampling_does_not_depend_on_batch_mates(backend: GenerationBackend) -> None:
    items = backend.encode(PROMPTS, [False] * len(PROMPTS))
    hot = GenerateParams(max_tokens=10, temperature=1.5, top_p=0.95, seed=7)
    together = backend.generate(items, [hot] * len(items))
    alone = backend.generate(items[1:2], [hot])
    assert together[1].token_ids == alone[0].token_ids
    other_seed = backend.generate(items[1:2], [hot.model_copy(update={"seed": 8})])
    greedy = backend.generate(items[1:2], [GenerateParams(max_tokens=10)])
    assert {tuple(other_seed[0].token_ids), tuple(greedy[0].token_ids)} != {
        tuple(alone[0].token_ids)
    }


def test_stop_sequences_cut_the_text_and_deltas_add_up(backend: GenerationBackend) -> None:
    [item] = backend.encode([PROMPTS[1]], [False])
    [free] = backend.generate([item], [GenerateParams(max_tokens=20)])
    stop = free.text[len(free.text) // 2 : len(free.text) // 2 + 3]
    assert len(stop) == 3 and stop.strip()
    deltas: list[str] = []
    [cut] = backend.generate(
        [item],
        [GenerateParams(max_tokens=20, stop=(stop,))],
        on_delta=lambda row, text: deltas.append(text),
    )
    assert cut.finish_reason == "stop"
    assert cut.text == free.text[: free.text.find(stop)]
    assert "".join(deltas) == cut.text and all(stop not in d for d in deltas)


def test_max_tokens_and_the_context_end_rows_with_length(backend: GenerationBackend) -> None:
    [item] = backend.encode([PROMPTS[0]], [False])
    [out] = backend.generate([item], [GenerateParams(max_tokens=5)])
    assert (out.finish_reason, out.completion_tokens) == ("length", 5)
    long_text = " the wheel" * 400
    [too_long] = backend.encode([long_text], [False])
    assert too_long.too_long and too_long.token_count > backend.max_tokens
    [kept] = backend.encode([long_text], [True])
    assert kept.truncated and kept.token_count == backend.max_tokens - 1
    [end] = backend.generate([kept], [GenerateParams(max_tokens=50)])
    assert (end.finish_reason, end.completion_tokens) == ("length", 1)  # one slot was left


def test_the_test_model_is_labelled_and_rebuilt_identically(tmp_path: Path) -> None:
    first = tiny_lm.build(tmp_path / "a")
    second = tiny_lm.build(tmp_path / "b")
    assert (first / "model.safetensors").read_bytes() == (second / "model.safetensors").read_bytes()
    assert '"test_model": true' in (first / "HEADRACE_TEST_MODEL.json").read_text()


def test_every_forward_pass_runs_under_the_pulse(backend: GenerationBackend) -> None:
    """The stall watch reads it: passes end as the rows decode, none is left open."""
    _, before = backend.pulse.read()
    items = backend.encode(PROMPTS[:2], [False, False])
    backend.generate(items, [GenerateParams(max_tokens=5)] * 2)
    deadline = time.monotonic() + 5  # the decode loop's last pass ends after it handed out
    while backend.pulse.read()[0] and time.monotonic() < deadline:  # the rows
        time.sleep(0.01)
    running, ended = backend.pulse.read()
    assert running == 0 and ended - before >= 4  # 5 new tokens: a pass may prefill and step
