"""Generation with vLLM's async engine, hosted in the worker process (extra ``[vllm]``; GPU).

Each row of a batch is added to the engine as its own request (``engine.generate(prompt,
sampling_params, request_id)``, an async generator of cumulative ``RequestOutput``s); vLLM's
continuous batching schedules them with whatever else is running. The engine lives on an
event loop in a background thread; the Celery task thread waits on a queue and gets every
delta on its own thread, in order per row. ``abort`` ends rows early (cancel). With
``vllm_priority_scheduling`` the engine runs vLLM's priority scheduler and each row carries
its request's class (``EncodedItem.rank``) as vLLM's ``priority``.

vLLM is imported only when a real engine is built; tests drive the adapter with a fake engine
of the same interface (vLLM cannot run on these machines).
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from headrace.workers.backends.base import (
    EncodedItem,
    FinishReason,
    FixedSampling,
    Generated,
    LoadTimings,
    Logprob,
    OnFinished,
    Sampling,
    Shape,
)
from headrace.workers.backends.pieces import token_pieces
from headrace.workers.backends.rows import encode_prompts

EngineFactory = Callable[[Path, dict[str, Any]], "AsyncEngine"]


class AsyncEngine(Protocol):
    def generate(
        self, prompt: Any, sampling_params: Any, request_id: str, **options: Any
    ) -> AsyncIterator[Any]: ...

    async def abort(self, request_id: str) -> None: ...


def vllm_engine(model_dir: Path, engine_args: dict[str, Any]) -> AsyncEngine:
    """A real vLLM AsyncLLMEngine (GPU). ``engine_args``: gpu_memory_utilization,
    max_num_seqs, max_num_batched_tokens, enable_prefix_caching, ..."""
    from vllm import AsyncEngineArgs, AsyncLLMEngine

    args = AsyncEngineArgs(model=str(model_dir), **engine_args)
    engine: AsyncEngine = AsyncLLMEngine.from_engine_args(args)
    return engine


def vllm_sampling(params: Sampling) -> Any:
    from vllm import SamplingParams

    kwargs = sampling_kwargs(params)
    structured = kwargs.pop("structured_outputs", None)
    if structured is not None:  # vLLM's structured outputs (its guidance or xgrammar backend)
        from vllm.sampling_params import StructuredOutputsParams

        kwargs["structured_outputs"] = StructuredOutputsParams(**structured)
    return SamplingParams(**kwargs)


def sampling_kwargs(params: Sampling) -> dict[str, Any]:
    """A row's sampling parameters as vLLM SamplingParams keywords (temperature 0 is greedy
    there too)."""
    return (
        {
            "n": 1,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "stop": list(params.stop),
            "seed": params.seed,
            "presence_penalty": params.presence_penalty,
            "frequency_penalty": params.frequency_penalty,
            "logit_bias": dict(params.logit_bias) or None,
        }
        | structured_kwargs(params)
        | ({"logprobs": params.logprobs} if params.logprobs is not None else {})
    )


def structured_kwargs(params: Sampling) -> dict[str, Any]:
    """A row's response format as vLLM's ``StructuredOutputsParams`` keywords: the schema
    itself (``json``), any JSON object (``json_object``), or tool calls as their Lark grammar
    (``grammar``: vLLM's guidance backend reads llguidance's Lark)."""
    fmt = getattr(params, "response_format", None)
    if fmt is None:
        return {}
    if fmt.type == "tool_calls":
        return {"structured_outputs": {"grammar": fmt.grammar()}}
    if fmt.type == "json_schema" and fmt.json_schema is not None:
        return {"structured_outputs": {"json": json.loads(fmt.json_schema)}}
    return {"structured_outputs": {"json_object": True}}


def vllm_logprobs(completion: Any, asked: int | None) -> list[Logprob] | None:
    """vLLM's per-token log probabilities (a dict per token: id -> its Logprob, with
    ``logprob`` and ``rank``, 1 the most likely) as the backends' ``Logprob``s: the sampled
    token's, and the ``asked`` best ranked."""
    if asked is None or completion.logprobs is None:
        return None
    out = []
    for token_id, step in zip(completion.token_ids, completion.logprobs, strict=False):
        ranked = sorted(step.items(), key=lambda kv: kv[1].rank)
        top = tuple((int(t), float(lp.logprob)) for t, lp in ranked if lp.rank <= asked)
        out.append(Logprob(int(token_id), float(step[token_id].logprob), top[:asked]))
    return out


@dataclass
class _Event:
    row: int
    delta: str = ""
    done: Generated | None = None
    error: BaseException | None = None


class VLLMBackend:
    task = "generate"
    cancel_check_s = 0.2
    continuous = True  # the engine batches every caller's rows together

    def __init__(
        self,
        name: str,
        model_dir: Path,
        max_tokens: int,
        engine_args: dict[str, Any],
        *,
        engine_factory: EngineFactory = vllm_engine,
        sampling: Callable[[Sampling], Any] = vllm_sampling,
        tokenizer: Any = None,
    ) -> None:
        self.name = name
        self.model_dir = model_dir
        self.max_tokens = max_tokens
        self.engine_args = engine_args
        # the request's class goes to vLLM only when its scheduler orders by it
        self.priority_scheduling = engine_args.get("scheduling_policy") == "priority"
        self.device = "cuda (vLLM)"
        self.timings = LoadTimings()
        self._factory = engine_factory
        self._sampling = sampling
        self._tokenizer = tokenizer
        self._engine: AsyncEngine | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm", daemon=True)
        self._running: set[str] = set()  # rows in the engine, by request id (for abort)

    # --- loading ------------------------------------------------------------------------
    def load_weights(self) -> None:
        """Building the engine loads the weights and profiles memory (vLLM does both)."""
        start = time.perf_counter()
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        self._thread.start()
        self._engine = self._call(self._make_engine())
        self.timings.load_weights_s = time.perf_counter() - start

    async def _make_engine(self) -> AsyncEngine:
        return self._factory(self.model_dir, self.engine_args)

    def build(self) -> None:
        pass  # vLLM builds its CUDA graphs while it starts

    def warm_up(self, shapes: Sequence[Shape]) -> None:
        """Every shape's rows in the engine at once (vLLM holds its own memory: the
        allocator's peak per bucket says little here and is not measured)."""
        start = time.perf_counter()
        filler = self._tokenizer(" the")["input_ids"][-1]
        items = [
            EncodedItem(ids=[filler] * min(s.length, self.max_tokens - 2), token_count=s.length)
            for s in shapes
            for _ in range(s.rows)
        ]
        self.generate(items, [FixedSampling(max_tokens=2)] * len(items))
        self.timings.warm_up_s = time.perf_counter() - start

    def encode(self, texts: list[str], truncate: list[bool]) -> list[EncodedItem]:
        return encode_prompts(self._tokenizer, self.max_tokens, texts, truncate)

    def token_pieces(self, ids: list[int]) -> list[tuple[str, list[int]]]:
        """Each token's own (text, bytes), as log probabilities report them."""
        return token_pieces(self._tokenizer, ids)

    # --- the batch path -----------------------------------------------------------------
    def generate(
        self,
        items: list[EncodedItem],
        params: Sequence[Sampling],
        on_delta: Callable[[int, str], None] | None = None,
        cancelled: Callable[[], set[int]] | None = None,
        on_finished: OnFinished | None = None,
        request_ids: list[str] | None = None,
    ) -> list[Generated]:
        """Every row added to the engine at once; deltas and finished rows are handed to
        ``on_delta`` and ``on_finished`` on this thread as they come (rows that finished
        together in one call). ``request_ids`` name the rows in the engine (for ``abort``)."""
        ids = request_ids or [f"row-{id(items)}-{i}" for i in range(len(items))]
        events: queue.Queue[_Event] = queue.Queue()
        for row, (item, p, rid) in enumerate(zip(items, params, ids, strict=True)):
            self._running.add(rid)  # before the engine has it: an abort then is not lost
            asyncio.run_coroutine_threadsafe(self._row(row, item, p, rid, events), self._loop)
        results: list[Generated | None] = [None] * len(items)
        aborted: set[int] = set()
        try:
            while any(r is None for r in results):
                if cancelled is not None:
                    for row in cancelled() - aborted:
                        aborted.add(row)
                        self.abort(ids[row])
                try:
                    got = [events.get(timeout=self.cancel_check_s)]
                    while not events.empty():
                        got.append(events.get())
                except queue.Empty:
                    continue
                finished: list[tuple[int, Generated]] = []
                for event in got:
                    if event.error is not None:
                        raise event.error
                    if event.delta and on_delta is not None:
                        on_delta(event.row, event.delta)
                    if event.done is not None:
                        results[event.row] = event.done
                        finished.append((event.row, event.done))
                if finished and on_finished is not None:
                    on_finished(finished)
        finally:
            for rid in ids:
                self._running.discard(rid)
        return [r for r in results if r is not None]

    async def _row(
        self,
        row: int,
        item: EncodedItem,
        params: Sampling,
        rid: str,
        events: queue.Queue[_Event],
    ) -> None:
        assert self._engine is not None
        sent = 0
        last: Any = None
        try:
            prompt = {"prompt_token_ids": item.ids}
            # vLLM's priority scheduler: lower first, and it may preempt a worse-ranked row
            ranked = {"priority": item.rank} if self.priority_scheduling else {}
            sampling = self._sampling(params)
            async for output in self._engine.generate(prompt, sampling, rid, **ranked):
                last = output
                text = output.outputs[0].text
                if len(text) > sent:
                    events.put(_Event(row, delta=text[sent:]))
                    sent = len(text)
            assert last is not None
            completion = last.outputs[0]
            reason: FinishReason = completion.finish_reason or "stop"
            if reason not in ("stop", "length", "abort"):
                reason = "stop"
            events.put(
                _Event(
                    row,
                    done=Generated(
                        text=completion.text,
                        token_ids=list(completion.token_ids),
                        finish_reason=reason,
                        prompt_tokens=len(item.ids),
                        logprobs=vllm_logprobs(completion, params.logprobs),
                    ),
                )
            )
        except asyncio.CancelledError:  # aborted in a way that cancels the generator
            completion = last.outputs[0] if last is not None else None
            done = Generated(
                text=completion.text if completion else "",
                token_ids=list(completion.token_ids) if completion else [],
                finish_reason="abort",
                prompt_tokens=len(item.ids),
            )
            events.put(_Event(row, done=done))
        except BaseException as exc:  # the waiting thread raises it (the batch is bisected)
            events.put(_Event(row, error=exc))

    def abort(self, request_id: str) -> None:
        """Stop a running row; it finishes with ``abort`` and the text it had."""
        if self._engine is not None and request_id in self._running:
            self._call(self._engine.abort(request_id))

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
