"""Continuous batching for a transformers causal LM: one decode loop per worker process, which
rows join and leave at every step (iteration-level scheduling, as in Orca and vLLM).

The worker's batch threads hand their rows in (``generate``) and wait for their own; the
loop, on its own thread, repeats:

1. **join**: rows waiting (up to ``max_rows`` decoding at once, and only as many as the KV
   cache's room, ``kv_tokens``, holds at their longest: the rest wait, nothing runs out of
   memory) are run through the model together (the prefill) and join the running ones, on
   the loop's cadence (``cadence.py``), or at once when nothing runs, when those with room
   would grow the running batch by a quarter, or for a better class;
2. **step**: one token for every running row, each at its own position;
3. **leave**: finished rows leave (from one left-padded cache once they are a quarter of it;
   from slots at once).

Rows wait in the order of their class (``EncodedItem.rank``: interactive, default, then the
rest), and when the loop has no place or no KV room for a waiting row, it may **preempt**
running rows of a worse class (the newest such first, ``seats.py``): a preempted row's KV
cache is dropped and it waits at the head of its class, to resume by recompute (its prompt
and the tokens it has so far are prefilled again; its sampling goes on at the same step,
its stream stays ordered).

A row keeps every property of a statically batched one (``generation.py``): its own sampling
parameters and seed, stop sequences, deltas that never hold the start of a stop
sequence, cancellation (rows end with ``abort``). Its tokens do not depend on who it ran
with, up to floating point (padding changes the shapes the kernels see). Deltas and the
cancellation check happen on the caller's thread, so the loop does no IO.

A caller's rows and a running row's state are in ``decode_jobs.py``; the running rows and
their cache in ``running_batch.py`` (one left-padded transformers ``DynamicCache``) or
``slot_cache.py`` (fixed slots, a GPU's). A model whose cache has layers of another kind
(sliding windows, state-space layers) is refused (``running_batch.Unsupported``) and served
one batch at a time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from headrace.workers.backends.base import EncodedItem, Generated, Logprob, OnFinished, Sampling
from headrace.workers.backends.cadence import Cadence
from headrace.workers.backends.decode_jobs import (
    DecodeJob,
    LiveRow,
    OnDelta,
    WaitingRows,
    context_of,
    rank,
)
from headrace.workers.backends.pulse import Pulse
from headrace.workers.backends.running_batch import (
    RunningBatch,
    check_layers,
    last_logits,
    prefill_inputs,
)
from headrace.workers.backends.sampling import Chosen
from headrace.workers.backends.seats import Seat, kv_fits, to_preempt
from headrace.workers.backends.slot_cache import SlotBatch
from headrace.workers.packing import by_length

log = logging.getLogger(__name__)

# What a prefill forward pass costs beyond its tokens, in tokens (a CPU measurement: one
# pass ~1.5 ms, a prompt token ~0.023 ms): joining rows are grouped by length only where
# the padding saved is worth another pass
PREFILL_OVERHEAD_TOKENS = 64
# On a GPU a pass is its ~750 kernel launches (a ~300M model: ~15 ms of host time on an
# H200) and a prompt token about a microsecond: an estimate, the embedding batches' fitted
# fixed cost (docs/configuration.md, batch_overhead_tokens), until a lent GPU measures it
GPU_PREFILL_OVERHEAD_TOKENS = 8192


class ContinuousDecoder:
    """``model``: a causal LM in eval mode; ``advance(row, token)`` appends a sampled token
    to a row and decides whether it finished (``GenerationBackend._advance``);
    ``new_row(params, prompt_tokens, streams)`` makes a row's state (``row.end(reason)``
    ends it); ``choose(logits, rows)`` picks every row's token on the device
    (``GenerationBackend._choose``): a step copies its tokens to the host once."""

    def __init__(
        self,
        model: Any,
        *,
        new_row: Callable[[Sampling, int, bool], Any],
        advance: Callable[[Any, int, Logprob | None], None],
        choose: Callable[[torch.Tensor, list[Any]], Chosen],
        pad_id: int,
        device: torch.device,
        context: int,
        cache_arg: str,
        max_rows: int = 256,
        cancel_check_s: float = 0.2,
        join_every: int = 4,
        step_mask: Callable[[torch.Tensor], torch.Tensor] | None = None,
        pulse: Pulse | None = None,
        kv_tokens: int | None = None,
        preempt: bool = True,
        slots: SlotBatch | None = None,
        prefill_overhead_tokens: int = PREFILL_OVERHEAD_TOKENS,
    ) -> None:
        self.model = model
        self._new_row = new_row
        self._advance = advance
        self._choose = choose
        self.pad_id = pad_id
        self.device = device
        self.context = context
        self.cache_arg = cache_arg
        self.max_rows = max_rows
        # the KV cache's room in tokens (the memory plan's): rows join only while every
        # running row fits at its longest; None: only max_rows bounds them
        self.kv_tokens = kv_tokens
        self.cancel_check_s = cancel_check_s
        self.preempt = preempt  # a better class may take a worse one's place when full
        self.preempted = 0  # rows that gave their place up (and were resumed later)
        self._waiting = WaitingRows()
        # the running rows: on fixed slots (a GPU's: steps replayed as CUDA graphs) or in
        # one left-padded cache
        self._running: RunningBatch[LiveRow] | SlotBatch = (
            RunningBatch(model, cache_arg, step_mask) if slots is None else slots
        )
        self._wake = threading.Condition()
        self._closed = False
        self.cadence = Cadence(join_every)  # how often rows join, from what passes cost
        self.prefill_overhead_tokens = prefill_overhead_tokens  # a pass's cost, in tokens
        self._joined_at = 0  # the step rows last joined at
        self.pulse = pulse or Pulse()  # each pass of the loop (prefills, a step) moves it
        self.steps = 0  # decode steps run (for tests and metrics)
        self.tokens = 0  # output tokens the rows got (their completion tokens, as they come)
        self.most_rows = 0  # the most rows ever decoded in one step
        self.cpu_s = 0.0  # CPU seconds the loop's thread has used (what a token costs)
        self.pass_s = 0.0  # seconds the loop's passes took: its rows' charges add up to it
        self._done: list[LiveRow] = []  # rows this pass finished, told after it is charged
        self._thread = threading.Thread(target=self._loop, name="decode", daemon=True)
        self._thread.start()

    # --- the callers' side --------------------------------------------------------------------
    def generate(
        self,
        items: Sequence[EncodedItem],
        params: Sequence[Sampling],
        on_delta: OnDelta | None = None,
        cancelled: Callable[[], set[int]] | None = None,
        on_finished: OnFinished | None = None,
    ) -> list[Generated]:
        """Decode ``items`` with whatever else runs; return when all of them finished. Deltas,
        rows as they finish (those that finished by the same step together) and cancellation
        checks run on this thread (the backend has refused too_long and empty items)."""
        if not items:
            return []
        job = DecodeJob(
            prompts=[list(item.ids) for item in items],
            rows=[
                self._new_row(p, len(item.ids), on_delta is not None)
                for item, p in zip(items, params, strict=True)
            ],
            ranks=[item.rank for item in items],
            left=len(items),
            streams=on_delta is not None,
        )
        with self._wake:
            if self._closed:
                raise RuntimeError("the decoder is closed")
            self._waiting.enqueue([(job, i) for i in range(len(items))])
            self._wake.notify()
        return job.wait(on_delta, cancelled, on_finished, self.cancel_check_s)

    @property
    def waiting(self) -> int:
        """Rows waiting to join (none while the loop keeps up with its callers)."""
        return len(self._waiting)

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(5)

    # --- the loop -----------------------------------------------------------------------------
    def _loop(self) -> None:
        started = time.thread_time()
        while True:
            with self._wake:
                while not self._waiting and not self._running and not self._closed:
                    self._wake.wait()
                if self._closed:
                    everyone = {live.job for live in self._running.rows}
                    everyone |= {job for job, _ in self._waiting}
                    self._fail(everyone, RuntimeError("the decoder closed"))
                    return
                joining = self._joining()
            # the rows this pass decodes share its time (the cost each is charged)
            members = [live.row for live in self._running.rows if live.row.finish is None]
            members += [job.rows[i] for job, i in joining]
            began = time.perf_counter()
            try:
                with torch.inference_mode(), self.pulse.forward():
                    if joining:
                        self._join(joining)
                        self.cadence.prefilled(time.perf_counter() - began)
                    if self._running:
                        stepping = time.perf_counter()
                        self._step()
                        self.cadence.stepped(time.perf_counter() - stepping)
            except Exception as exc:  # every row running shared the failed forward pass
                log.warning("decode step failed for %d rows: %r", len(self._running), exc)
                jobs = {live.job for live in self._running.rows} | {job for job, _ in joining}
                self._fail(jobs, exc)
            took = time.perf_counter() - began
            self.pass_s += took
            for row in members:
                row.device_s += took / len(members)
            done, self._done = self._done, []
            for live in done:  # their callers read the charge: it includes this pass
                live.job.finished(live.index)
            self.cpu_s = time.thread_time() - started

    def _joining(self) -> list[tuple[DecodeJob, int]]:
        """The rows to prefill now. A prefill is a forward pass of its own, so rows join a
        running batch on the loop's cadence (``cadence.py``: every ``join_every`` steps or
        more), or at once when those that have room would make it grow by a quarter, when it
        is empty, or when a waiting row is of a better class than a running one. At most
        ``max_rows`` run, and, with ``kv_tokens``, only as many as the KV cache holds at
        their longest (``kv_fits``); the rest wait in order. Better-classed waiting rows that
        have no place or no KV room preempt worse-classed running ones (``_preempt``)."""
        if not self._waiting:
            return []
        due = self.steps - self._joined_at >= self.cadence.steps_between_joins()
        grows = min(len(self._waiting), self._room()) * 4 >= len(self._running)
        if not (due or grows or not self._running or self._better_waits()):
            return []
        if self.preempt:
            try:
                with torch.inference_mode():  # the cache's tensors are inference tensors
                    self._preempt()
            except Exception as exc:  # as a failed step: its rows fail, the loop goes on
                log.warning("preempting failed for %d rows: %r", len(self._running), exc)
                self._fail({live.job for live in self._running.rows}, exc)
        running, room = len(self._running), self._room()
        if room <= 0:
            return []
        longest = max((self._need(live.job, live.index) for live in self._running.rows), default=0)
        joining: list[tuple[DecodeJob, int]] = []
        while self._waiting and len(joining) < room:
            need = self._need(*self._waiting[0])
            rows = running + len(joining) + 1
            if rows > 1 and not kv_fits(rows, max(longest, need), self.kv_tokens):
                break  # it waits for rows to finish (one alone always runs)
            longest = max(longest, need)
            joining.append(self._waiting.popleft())
        if joining:
            self._joined_at = self.steps
        return joining

    def _room(self) -> int:
        """Places for rows to join (on slots: free slots, bounded by the KV room)."""
        room = self.max_rows - len(self._running)
        if isinstance(self._running, SlotBatch):
            self._running.limit(self.kv_tokens)
            room = min(room, self._running.free)
        return room

    def _better_waits(self) -> bool:
        """The first waiting row is of a better class than the worst running one."""
        worst = max((rank((live.job, live.index)) for live in self._running.rows), default=0)
        return rank(self._waiting[0]) < worst

    def _preempt(self) -> None:
        """Waiting rows of a better class than some running rows take their room when the
        loop has no place or no KV room for them (``seats.to_preempt``): those running rows
        leave the batch and wait, at the head of their class, to be resumed."""
        rows = self._running.rows
        if not self._better_waits():  # the usual case, one class: nobody gives way
            return
        running = [
            Seat(
                rank((live.job, live.index)),
                self._need(live.job, live.index),
                len(live.row.ids),
                live.row.finish is None,
            )
            for live in rows
        ]
        waiting = (Seat(rank(entry), self._need(*entry)) for entry in self._waiting)
        chosen = to_preempt(running, waiting, self.max_rows, self.kv_tokens)
        if not chosen:
            return
        evicted = [rows[k] for k in chosen]  # worst class, fewest tokens held, first
        gone = set(chosen)
        self._running.keep([k for k in range(len(rows)) if k not in gone])
        self._waiting.enqueue([(live.job, live.index) for live in reversed(evicted)], resumed=True)
        self.preempted += len(evicted)

    def _need(self, job: DecodeJob, index: int) -> int:
        """KV tokens a row may come to hold: its prompt and all it may generate."""
        max_tokens: int = job.rows[index].params.max_tokens
        return min(len(job.prompts[index]) + max_tokens, self.context)

    def _join(self, joining: list[tuple[DecodeJob, int]]) -> None:
        """Prefill the joining rows in groups of similar prompt length, longest first: a
        prefill pads every row to its longest (rows of 4 to 40 words joining together were
        half padding), and rows of similar length side by side keep the chunked attention's
        chunks narrow (``ragged_attention``)."""
        lengths = [len(context_of(job, i)) for job, i in joining]
        for group in by_length(joining, lengths, self.prefill_overhead_tokens):
            self._prefill(group)

    def _prefill(self, joining: list[tuple[DecodeJob, int]]) -> None:
        """Prefill the joining rows together, take each one's first token, and add the
        unfinished ones to the running batch."""
        prompts = [context_of(job, i) for job, i in joining]
        right = self._running.right_padded  # slots: every prompt from column 0
        ids, mask = prefill_inputs(prompts, self.pad_id, self.device, right)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache = out[self.cache_arg]
        check_layers(cache)
        new = [
            LiveRow(job, i, position=len(p)) for (job, i), p in zip(joining, prompts, strict=True)
        ]
        self._take_all(new, last_logits(out.logits, prompts, right))
        keep = [k for k, live in enumerate(new) if live.row.finish is None]
        if keep:
            self._running.take_prefill(cache, mask, new, keep)

    def _step(self) -> None:
        """Cancelled rows leave; one token for every other row; finished rows leave."""
        batch = self._running
        for live in batch.rows:
            if live.row.finish is None and live.index in live.job.cancelled:
                live.row.end("abort")
                live.emit()
                self._done.append(live)
        self._leave()
        if not batch:
            return
        tokens = [live.token for live in batch.rows]
        positions = [live.position for live in batch.rows]
        logits = batch.decode(tokens, positions)
        self.steps += 1
        running = [live for live in batch.rows if live.row.finish is None]
        self.most_rows = max(self.most_rows, len(running))
        for live in running:
            live.position += 1
        self._take_all(batch.rows, logits)
        self._leave()

    def _take_all(self, lives: list[LiveRow], logits: torch.Tensor) -> None:
        """Each row's next token, chosen for all rows at once on the device and copied to
        the host once (``choose``)."""
        chosen = self._choose(logits, [live.row for live in lives])
        for k, (live, token) in enumerate(zip(lives, chosen.tokens, strict=True)):
            if live.row.finish is None:  # else finished at an earlier step, not yet cut out
                self._take(live, token, chosen.logprobs.get(k))

    def _take(self, live: LiveRow, token: int, logprob: Logprob | None = None) -> None:
        """Give the row its next token; it finishes on a stop, at max_tokens, or where the
        context ends (``length``)."""
        row = live.row
        held = len(row.ids)
        self._advance(row, token, logprob)
        self.tokens += len(row.ids) - held  # not an end-of-sequence token
        if row.finish is None and row.prompt_tokens + len(row.ids) >= self.context:
            row.end("length")
        live.token = row.ids[-1] if row.ids else self.pad_id
        live.emit()
        if row.finish is not None:
            self._done.append(live)  # told once the pass's time is charged

    def _leave(self) -> None:
        """Cut finished rows out of the running batch once they are a quarter of it (or all
        of it). Cutting moves rows (a copy of each one moved), so until then they ride
        along: fed padding, their outputs ignored, their position held. On slots, at once."""
        rows = self._running.rows
        keep = [k for k, live in enumerate(rows) if live.row.finish is None]
        if len(keep) == len(rows):
            return
        cheap = self._running.cuts_free
        if keep and (len(rows) - len(keep)) * 4 < len(rows) and not cheap:
            return  # under a quarter finished: they ride along
        self._running.keep(keep)  # none kept: the batch empties

    # --- failures -----------------------------------------------------------------------------
    def _fail(self, jobs: set[DecodeJob], exc: BaseException) -> None:
        """Every job with a row in the failed pass fails (its caller raises ``exc``, and
        bisects its batch as for a static one); the others go on."""
        with self._wake:
            self._waiting = WaitingRows((job, i) for job, i in self._waiting if job not in jobs)
        self._running.clear()
        for job in jobs:
            job.error = exc
            job.events.put(None)
