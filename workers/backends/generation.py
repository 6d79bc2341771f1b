"""Batched text generation with a transformers causal LM (CPU or CUDA).

A batch of prompts is left-padded to its longest row and decoded step by step with the KV
cache, each row with its own parameters: ``max_tokens``, ``temperature`` (0: greedy),
``top_p``, stop sequences, and a seed (its noise is drawn from the seed and the step, so a
row samples the same tokens whatever its batch-mates). Text comes out as deltas while it is
decoded; a delta never holds text that could still turn out to begin a stop sequence.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from headrace.workers.backends.base import (
    EncodedItem,
    FixedSampling,
    Generated,
    LoadTimings,
    Logprob,
    OnFinished,
    Sampling,
    Shape,
    cuda_memory,
    place_on_device,
    warm_each,
)
from headrace.workers.backends.continuous import (
    GPU_PREFILL_OVERHEAD_TOKENS,
    PREFILL_OVERHEAD_TOKENS,
    ContinuousDecoder,
)
from headrace.workers.backends.decode_graphs import StepGraphs
from headrace.workers.backends.embedding import pick_device
from headrace.workers.backends.grammar import Constraints
from headrace.workers.backends.pieces import token_pieces
from headrace.workers.backends.pulse import Pulse
from headrace.workers.backends.rows import DecodeRow, detokenizer, encode_prompts
from headrace.workers.backends.running_batch import Unsupported, check_layers, prefill_inputs
from headrace.workers.backends.sampling import Chosen, choose_step, new_seed
from headrace.workers.backends.slot_cache import SlotBatch, eager

log = logging.getLogger(__name__)

OnDelta = Callable[[int, str], None]  # (row, text)


def _roomy(cache: Any) -> Any:
    """``cache`` with layers that take each step's column into spare room
    (``kv_room.RoomyLayer``): transformers' own layer appends it with ``torch.cat``, a copy
    of the whole cache at every step (62% of a 256-row decode's GPU time on an H200). A
    cache of other layers is left as it is."""
    try:
        check_layers(cache)
    except Unsupported:
        return cache
    from headrace.workers.backends.kv_room import hold_all

    hold_all(cache)
    return cache


def _seed(asked: int | None) -> int:
    return new_seed() if asked is None else asked


class GenerationBackend:
    """``continuous_rows``: decode every caller's rows in one loop that rows join and leave at
    each step (``continuous.py``), at most this many at once; None: each ``generate`` call
    decodes its own rows to the end (static batching). ``cuda_graphs``: on a GPU that loop
    keeps its rows on fixed slots (``slot_cache.py``) and replays each step as a CUDA graph
    (``decode_graphs.py``); ``slots`` asks for the slots on any device (on a CPU they run
    eagerly: slower there than the left-padded cache, which skips padding)."""

    task = "generate"
    cancel_check_s = 0.2  # how often a running batch asks which rows were cancelled

    def __init__(
        self,
        name: str,
        model_dir: Path,
        max_tokens: int,
        device: str = "auto",
        continuous_rows: int | None = None,
        cuda_graphs: bool = True,
        slots: bool | None = None,
    ) -> None:
        from transformers import AutoTokenizer

        self.name = name
        self.model_dir = model_dir
        self.max_tokens = max_tokens  # prompt plus generated tokens: the model's context
        self.device = pick_device(device)
        self.timings = LoadTimings()
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self._detokenize = detokenizer(self.tokenizer)
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.eos_id = int(self.tokenizer.eos_token_id)
        self._model: Any = None
        self._cache_arg = "past_key_values"
        # a decode step's [rows, columns] mask as the model takes it (None: as it is)
        self._step_mask: Callable[[torch.Tensor], torch.Tensor] | None = None
        self._weights_bytes = 0
        self.continuous_rows = continuous_rows
        self.cuda_graphs = cuda_graphs and self.device.type == "cuda"
        self.slots = self.cuda_graphs if slots is None else slots
        self.graphs: StepGraphs | None = None  # the decode steps' CUDA graphs, when replayed
        self.slot_batch: SlotBatch | None = None  # the continuous decoder's slots, when used
        self.decoder: ContinuousDecoder | None = None
        self.pulse = Pulse()  # every forward pass is a step (``workers.stall_watch``)
        self._constraints = Constraints(self.tokenizer, self.eos_id)  # structured output
        # fast tokenizers refuse to be used from two threads at once ("Already borrowed")
        self._tokenizer_lock = threading.Lock()

    @property
    def continuous(self) -> bool:
        """Whether several callers' rows share the decode loop (set by ``build``)."""
        return self.decoder is not None

    # --- loading, in three timed stages -------------------------------------------------
    def load_weights(self) -> None:
        from transformers import AutoModelForCausalLM

        start = time.perf_counter()
        self._model = AutoModelForCausalLM.from_pretrained(str(self.model_dir))
        self.timings.load_weights_s = time.perf_counter() - start

    def build(self) -> None:
        start = time.perf_counter()
        self._model, self._weights_bytes = place_on_device(self._model, self.device)
        # transformers 5 names the KV cache argument and output ``cache``; 4.x
        # ``past_key_values``
        forward = inspect.signature(self._model.forward).parameters
        self._cache_arg = "cache" if "cache" in forward else "past_key_values"
        self._choose_attention()
        if self.continuous_rows is not None:
            self.decoder = self._continuous_decoder(self.continuous_rows)
        self.timings.build_s = time.perf_counter() - start

    def _choose_attention(self) -> None:
        """The attention kernel, on purpose. On CUDA, not cuDNN's SDPA (``place_on_device``
        turned it off: ``base.choose_attention_kernels``). On CPU, decode steps skip the
        padding columns they can (``ragged_attention``; on a GPU masked columns cost less
        than the extra kernels).
        On SDPA a decode step hands the model its mask prepared (4D boolean): from a 2D one
        transformers builds it again and asks whether it is all ones, a wait for the device
        at every step."""
        from headrace.workers.backends import ragged_attention

        sdpa = getattr(self._model.config, "_attn_implementation", None) == "sdpa"
        if self.device.type != "cuda" and sdpa and not self.slots:
            ragged_attention.use_for(self._model)
        self._step_mask = ragged_attention.step_mask if sdpa else None

    def _continuous_decoder(self, max_rows: int) -> ContinuousDecoder | None:
        with torch.inference_mode():
            one = torch.tensor([[self.pad_id]], device=self.device)
            probe = self._model(input_ids=one, attention_mask=torch.ones_like(one))
        try:
            check_layers(probe[self._cache_arg])
        except Unsupported as exc:
            log.warning("%s: %s; batches are decoded one at a time", self.name, exc)
            return None
        return ContinuousDecoder(
            self._model,
            new_row=self._new_row,
            advance=self._advance,
            choose=self._choose,
            pulse=self.pulse,
            pad_id=self.pad_id,
            device=self.device,
            context=self.max_tokens,
            cache_arg=self._cache_arg,
            max_rows=max_rows,
            cancel_check_s=self.cancel_check_s,
            step_mask=self._step_mask,
            slots=self._slot_batch(max_rows, probe[self._cache_arg]),
            prefill_overhead_tokens=(
                GPU_PREFILL_OVERHEAD_TOKENS
                if self.device.type == "cuda"
                else PREFILL_OVERHEAD_TOKENS
            ),
        )

    def _slot_batch(self, max_rows: int, probe: Any) -> SlotBatch | None:
        """The decoder's slots (its steps replayed as CUDA graphs on a GPU), where asked."""
        if not self.slots:
            return None
        runner = eager
        if self.cuda_graphs:
            self.graphs = StepGraphs()
            runner = self.graphs.run
        self.slot_batch = SlotBatch(
            self._model,
            self._cache_arg,
            self.pad_id,
            self.device,
            capacity=max_rows,
            width=self.max_tokens,
            runner=runner,
            # a token's keys and values, every layer (the probe's cache holds one token)
            token_bytes=sum(2 * layer.keys.nbytes for layer in probe.layers),
        )
        return self.slot_batch

    def close(self) -> None:
        if self.decoder is not None:
            self.decoder.close()

    def warm_up(self, shapes: Sequence[Shape]) -> None:
        """Each warm-up batch: its rows of prompts at its length, two tokens each; the
        logits must be finite. On slots, decoded statically: the slots are allocated at the
        first request, once the worker gave the loop its memory plan's KV room (the plan is
        made from what the warm-up measured)."""
        start = time.perf_counter()
        filler = self.tokenizer(" the")["input_ids"][-1]

        def run(shape: Shape) -> None:
            length = min(shape.length, self.max_tokens - 2)
            ids = torch.full((shape.rows, length), filler, dtype=torch.long, device=self.device)
            with torch.inference_mode():
                logits = self._model(input_ids=ids).logits
            if not torch.isfinite(logits).all():
                raise RuntimeError(f"warm-up at {shape.length} tokens: logits not finite")
            items = [EncodedItem(ids=[filler] * length, token_count=length)] * shape.rows
            params = [FixedSampling(max_tokens=2)] * shape.rows
            if self.slot_batch is None:
                self.generate(items, params)
                return
            with torch.inference_mode():  # the slots wait for the memory plan's KV room
                self._static(items, params, None, None)

        kind, peaks = warm_each(self.device, shapes, run)
        self.timings.memory_kind, self.timings.peak_bytes_per_bucket = kind, peaks
        if self.device.type == "cuda":
            largest = max(shapes, key=lambda s: s.tokens)
            self.timings.memory = cuda_memory(
                self.device, self._weights_bytes, largest.tokens, max(peaks.values())
            )
        self.timings.warm_up_s = time.perf_counter() - start

    # --- the batch path -----------------------------------------------------------------
    def encode(self, texts: list[str], truncate: list[bool]) -> list[EncodedItem]:
        with self._tokenizer_lock:
            return encode_prompts(self.tokenizer, self.max_tokens, texts, truncate)

    @torch.inference_mode()
    def generate(
        self,
        items: list[EncodedItem],
        params: Sequence[Sampling],
        on_delta: OnDelta | None = None,
        cancelled: Callable[[], set[int]] | None = None,
        on_finished: OnFinished | None = None,
    ) -> list[Generated]:
        """Continuous: rows go to ``on_finished`` as they finish. Static: every row is
        returned at the end (``on_finished`` is not called)."""
        if any(item.too_long or not item.ids for item in items):
            raise ValueError("too_long or empty items cannot be generated from")
        if self.decoder is not None:
            return self.decoder.generate(items, params, on_delta, cancelled, on_finished)
        return self._static(items, params, on_delta, cancelled)

    def _static(
        self,
        items: list[EncodedItem],
        params: Sequence[Sampling],
        on_delta: OnDelta | None,
        cancelled: Callable[[], set[int]] | None,
    ) -> list[Generated]:
        """Decode these rows to their end, alone."""
        longest = max(len(item.ids) for item in items)
        ids, mask = prefill_inputs([list(item.ids) for item in items], self.pad_id, self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        rows = [
            self._new_row(p, len(item.ids), on_delta is not None)
            for item, p in zip(items, params, strict=True)
        ]
        steps = min(max(p.max_tokens for p in params), self.max_tokens - longest)
        cache: Any = None
        checked = time.monotonic()
        step_mask = mask  # the prefill's is 2D; decode steps', prepared where the model takes it
        passes_s = 0.0  # the forward passes' time, to their host copies
        for _ in range(steps):
            if cancelled is not None and time.monotonic() - checked >= self.cancel_check_s:
                checked = time.monotonic()
                for i in cancelled():
                    if rows[i].finish is None:
                        rows[i].end("abort")
            if all(row.finish for row in rows):
                break
            began = time.perf_counter()
            with self.pulse.forward():  # to the host copy: there a hung kernel shows
                out = self._model(
                    input_ids=ids,
                    attention_mask=step_mask,
                    position_ids=positions,
                    use_cache=True,
                    **{self._cache_arg: cache},
                )
                if cache is None:  # the prefill's cache: steps write into room, not a copy
                    cache = _roomy(out[self._cache_arg])
                # every row's token on the device, then one copy to the host for the step
                chosen = self._choose(out.logits[:, -1, :], rows)
            passes_s += time.perf_counter() - began
            for i, row in enumerate(rows):
                if row.finish is None:
                    self._advance(row, chosen.tokens[i], chosen.logprobs.get(i))
                if on_delta is not None:
                    delta = row.pending_delta()
                    if delta:
                        on_delta(i, delta)
            if all(row.finish for row in rows):
                break
            ids = chosen.ids[:, None]  # finished rows ride along; their outputs are not read
            mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
            step_mask = mask if self._step_mask is None else self._step_mask(mask)
            positions = positions[:, -1:] + 1
        for i, row in enumerate(rows):
            if row.finish is None:
                row.end("length")  # the context ran out before max_tokens
                if on_delta is not None and (delta := row.pending_delta()):
                    on_delta(i, delta)
        share_ms = passes_s * 1000 / len(rows)  # every row rode every pass, padded alike
        return [
            Generated(r.text, r.ids, r.finish or "length", r.prompt_tokens, share_ms, r.logprobs)
            for r in rows
        ]

    def _new_row(self, params: Sampling, prompt_tokens: int, streams: bool) -> DecodeRow:
        return DecodeRow(
            params,
            prompt_tokens,
            _seed(params.seed),
            self._text_of,
            streams,
            self._constraints.matcher(params),
        )

    def _choose(self, logits: torch.Tensor, rows: Sequence[DecodeRow]) -> Chosen:
        """Every row's next token on the device (``sampling.choose_step``), within its
        grammar where it has one (``grammar.Constraints``), with its log probability under
        the model where asked; one copy to the host."""
        masked = self._constraints.mask(
            logits, [row.matcher if row.finish is None else None for row in rows]
        )
        return choose_step(
            logits,
            masked,
            [row.params for row in rows],
            [row.seed for row in rows],
            [len(row.ids) for row in rows],
            [row.ids for row in rows],
            [k for k, row in enumerate(rows) if row.finish is None and row.logprobs is not None],
        )

    def token_pieces(self, ids: list[int]) -> list[tuple[str, list[int]]]:
        """Each token's own (text, bytes), as log probabilities report them."""
        with self._tokenizer_lock:
            return token_pieces(self.tokenizer, ids)

    def _text_of(self, ids: list[int]) -> str:
        with self._tokenizer_lock:
            return self._detokenize(ids)

    def _advance(self, row: DecodeRow, token: int, logprob: Logprob | None = None) -> None:
        """Append ``token`` to ``row``, or end it: at the end-of-sequence token, a stop
        sequence, or ``max_tokens``. A row's text is kept up to date at every token only
        where it is watched (``DecodeRow``)."""
        if token == self.eos_id:
            row.end("stop")
            return
        row.ids.append(token)
        if row.logprobs is not None and logprob is not None:
            row.logprobs.append(logprob)
        if row.watched:
            row.text = self._text_of(row.ids)
        cuts = [row.text.find(s) for s in row.params.stop if s in row.text]
        if cuts:
            row.text = row.text[: min(cuts)]
            row.finish = "stop"
        elif row.matcher is not None and (
            not row.matcher.consume_token(token) or row.matcher.is_stopped()
        ):
            row.end("stop")  # its grammar is complete (a token it refused cannot come)
        elif len(row.ids) >= row.params.max_tokens:
            row.end("length")
