"""The vLLM adapter against a fake engine with vLLM's async interface (vLLM cannot run on
these machines): every row is added to the engine at once, deltas come out in order per row
on the caller's thread, sampling parameters reach the engine, abort ends a row early, and an
engine error fails the batch."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from headrace.config.settings import Settings
from headrace.schemas.params import GenerateParams
from headrace.schemas.response_format import ResponseFormat
from headrace.schemas.tool_calls import call_schema
from headrace.workers.backends.base import EncodedItem, Shape
from headrace.workers.backends.vllm_engine import VLLMBackend, sampling_kwargs, vllm_logprobs


class FakeTokenizer:
    def __call__(self, texts: str | list[str]) -> dict[str, Any]:
        if isinstance(texts, str):
            return {"input_ids": [len(w) for w in texts.split()] or [1]}
        return {"input_ids": [[len(w) for w in t.split()] for t in texts]}


class FakeEngine:
    """Cumulative outputs, one word per step: ``w<prompt length>.<step>``; honours
    max_tokens and stop, ends with ``abort`` when aborted, fails on prompt [13]."""

    def __init__(self) -> None:
        self.active = 0
        self.max_active = 0
        self.seen: list[dict[str, Any]] = []
        self.aborted: set[str] = set()
        self.started = threading.Event()
        self.priorities: list[int | None] = []

    async def generate(
        self,
        prompt: dict[str, list[int]],
        sampling: dict[str, Any],
        request_id: str,
        priority: int | None = None,
    ) -> AsyncIterator[Any]:
        self.seen.append(sampling)
        self.priorities.append(priority)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if prompt["prompt_token_ids"] == [13]:
                raise RuntimeError("engine failed")
            text, tokens, reason = "", [], None
            for step in range(sampling["max_tokens"]):
                await asyncio.sleep(0.002)
                if request_id in self.aborted:
                    reason = "abort"
                    break
                word = f" w{len(prompt['prompt_token_ids'])}.{step}"
                if any(s in text + word for s in sampling["stop"]):
                    reason = "stop"
                    break
                text, tokens = text + word, [*tokens, step]
                yield _output(text, tokens, None)
                self.started.set()  # a word is out
            yield _output(text, tokens, reason or "length")
        finally:
            self.active -= 1

    async def abort(self, request_id: str) -> None:
        self.aborted.add(request_id)


def _output(text: str, tokens: list[int], reason: str | None) -> Any:
    completion = SimpleNamespace(text=text, token_ids=tokens, finish_reason=reason)
    return SimpleNamespace(outputs=[completion], finished=reason is not None)


@pytest.fixture
def engine_and_backend() -> tuple[FakeEngine, VLLMBackend]:
    engine = FakeEngine()
    backend = VLLMBackend(
        "fake",
        Path("/nonexistent"),
        512,
        {"gpu_memory_utilization": 0.5, "max_num_seqs": 8},
        engine_factory=lambda path, args: engine,
        sampling=sampling_kwargs,
        tokenizer=FakeTokenizer(),
    )
    backend.load_weights()
    backend.warm_up([Shape(16, 16, 1)])
    engine.seen.clear()
    engine.started.clear()
    return engine, backend


def test_rows_run_together_and_stream_in_order(
    engine_and_backend: tuple[FakeEngine, VLLMBackend],
) -> None:
    engine, backend = engine_and_backend
    items = backend.encode(["a b", "c d e", "f"], [False] * 3)
    params = [
        GenerateParams(max_tokens=5),
        GenerateParams(max_tokens=3, seed=4, temperature=0.7, top_p=0.9),
        GenerateParams(max_tokens=6, stop=(" w1.2",)),
    ]
    caller = threading.get_ident()
    deltas: dict[int, list[str]] = {0: [], 1: [], 2: []}

    def on_delta(row: int, text: str) -> None:
        assert threading.get_ident() == caller  # handed over on the task's own thread
        deltas[row].append(text)

    out = backend.generate(items, params, on_delta)
    assert engine.max_active == 3  # all added at once: the engine batches them
    assert [o.text for o in out] == [" w2.0 w2.1 w2.2 w2.3 w2.4", " w3.0 w3.1 w3.2", " w1.0 w1.1"]
    assert [o.finish_reason for o in out] == ["length", "length", "stop"]
    assert all("".join(deltas[i]) == out[i].text for i in range(3))
    assert deltas[0] == [" w2.0", " w2.1", " w2.2", " w2.3", " w2.4"]
    assert engine.seen[1] == {
        "n": 1,
        "max_tokens": 3,
        "temperature": 0.7,
        "top_p": 0.9,
        "stop": [],
        "seed": 4,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "logit_bias": None,
    }
    assert out[0].prompt_tokens == 2 and out[0].completion_tokens == 5


def test_abort_ends_a_row_early(engine_and_backend: tuple[FakeEngine, VLLMBackend]) -> None:
    engine, backend = engine_and_backend
    [item] = backend.encode(["a long prompt"], [False])
    result: list[Any] = []
    worker = threading.Thread(
        target=lambda: result.extend(
            backend.generate([item], [GenerateParams(max_tokens=4000)], request_ids=["req-1"])
        )
    )
    worker.start()
    assert engine.started.wait(5)
    backend.abort("req-1")
    worker.join(10)
    assert result and result[0].finish_reason == "abort"
    assert 0 < result[0].completion_tokens < 4000


def test_an_engine_error_fails_the_batch(
    engine_and_backend: tuple[FakeEngine, VLLMBackend],
) -> None:
    _, backend = engine_and_backend
    items = [EncodedItem(ids=[13], token_count=1), EncodedItem(ids=[1, 2], token_count=2)]
    with pytest.raises(RuntimeError, match="engine failed"):
        backend.generate(items, [GenerateParams(max_tokens=2)] * 2)


def test_penalties_and_logit_bias_go_to_vllm_as_its_sampling_params() -> None:
    kwargs = sampling_kwargs(
        GenerateParams(presence_penalty=0.5, frequency_penalty=-1.0, logit_bias={"3": -100})
    )
    assert (kwargs["presence_penalty"], kwargs["frequency_penalty"]) == (0.5, -1.0)
    assert kwargs["logit_bias"] == {3: -100.0}


def test_a_response_format_goes_to_vllm_as_its_structured_outputs() -> None:
    schema = {"type": "object", "properties": {"a": {"enum": [1, 2]}}, "required": ["a"]}
    as_schema = GenerateParams(
        response_format=ResponseFormat(type="json_schema", json_schema=schema)
    )
    assert sampling_kwargs(as_schema)["structured_outputs"] == {"json": schema}
    as_object = GenerateParams(response_format=ResponseFormat(type="json_object"))
    assert sampling_kwargs(as_object)["structured_outputs"] == {"json_object": True}
    assert "structured_outputs" not in sampling_kwargs(GenerateParams())
    calls = ResponseFormat(
        type="tool_calls", json_schema=call_schema([("f", None)]), tool_choice="required"
    )
    grammar = sampling_kwargs(GenerateParams(response_format=calls))["structured_outputs"]
    assert grammar == {"grammar": calls.grammar()} and "%json" in grammar["grammar"]


def test_logprobs_go_to_vllm_and_come_back_as_the_sampled_tokens_with_their_best_ranked() -> None:
    assert sampling_kwargs(GenerateParams(logprobs=2))["logprobs"] == 2
    assert "logprobs" not in sampling_kwargs(GenerateParams())

    def lp(value: float, rank: int) -> SimpleNamespace:
        return SimpleNamespace(logprob=value, rank=rank, decoded_token="x")

    completion = SimpleNamespace(
        token_ids=[7, 9],
        logprobs=[
            {7: lp(-0.1, 1), 3: lp(-2.5, 2), 4: lp(-3.0, 3)},
            {9: lp(-4.0, 5), 1: lp(-0.5, 1), 2: lp(-1.0, 2)},  # sampled: not in the best 2
        ],
    )
    got = vllm_logprobs(completion, 2)
    assert got is not None
    assert [(g.token_id, g.logprob) for g in got] == [(7, -0.1), (9, -4.0)]
    assert got[0].top == ((7, -0.1), (3, -2.5)) and got[1].top == ((1, -0.5), (2, -1.0))
    assert vllm_logprobs(completion, None) is None


def test_a_rows_class_is_vllms_priority_only_under_its_priority_scheduler() -> None:
    for policy, expected in (("priority", [0, 2]), (None, [None, None])):
        engine = FakeEngine()
        args = {"max_num_seqs": 8} | ({"scheduling_policy": policy} if policy else {})
        backend = VLLMBackend(
            "fake",
            Path("/nonexistent"),
            512,
            args,
            engine_factory=lambda path, args, engine=engine: engine,
            sampling=sampling_kwargs,
            tokenizer=FakeTokenizer(),
        )
        backend.load_weights()
        items = [
            dataclasses.replace(item, rank=rank)
            for item, rank in zip(backend.encode(["a b", "c"], [False] * 2), (0, 2), strict=True)
        ]
        backend.generate(items, [GenerateParams(max_tokens=2)] * 2)
        assert sorted(engine.priorities, key=str) == sorted(expected, key=str), policy
        backend.close()
    assert Settings(vllm_priority_scheduling=True).vllm_engine_args()["scheduling_policy"] == (
        "priority"
    )
