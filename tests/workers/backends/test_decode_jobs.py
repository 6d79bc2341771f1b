"""A caller's side of the continuous decoder (``DecodeJob.wait``), driven by a thread that
plays the decode loop: deltas in order, rows handed over as they finish, cancellation asked
for while rows run, and the loop's failure raised on the caller's thread."""

from __future__ import annotations

import threading
import time

import pytest

from headrace.workers.backends.base import FixedSampling, Generated
from headrace.workers.backends.decode_jobs import DecodeJob, LiveRow, context_of, rank
from headrace.workers.backends.rows import DecodeRow


def _job(rows: int, streams: bool = True) -> DecodeJob:
    made = [
        DecodeRow(FixedSampling(max_tokens=4), 3, 0, lambda ids: "x" * len(ids), streams)
        for _ in range(rows)
    ]
    return DecodeJob(prompts=[[1, 2, 3]] * rows, rows=made, ranks=[0, 2][:rows], left=rows)


def _finish(job: DecodeJob, index: int, tokens: list[int]) -> None:
    row = job.rows[index]
    row.ids, row.text = tokens, "x" * len(tokens)
    row.end("stop")
    job.finished(index)


def test_deltas_come_in_order_and_rows_are_handed_over_as_they_finish() -> None:
    job = _job(2)
    deltas: list[tuple[int, str]] = []
    handed: list[list[int]] = []
    first_handed = threading.Event()

    def loop() -> None:
        job.events.put((0, "he"))
        job.events.put((1, "a"))
        job.events.put((0, "llo"))
        _finish(job, 1, [7])
        first_handed.wait(5)  # a later step, once the caller has row 1
        _finish(job, 0, [5, 6])

    def on_finished(done: list[tuple[int, Generated]]) -> None:
        handed.append([i for i, _ in done])
        first_handed.set()

    threading.Thread(target=loop).start()
    out = job.wait(lambda i, text: deltas.append((i, text)), None, on_finished, 0.2)
    assert deltas == [(0, "he"), (1, "a"), (0, "llo")]
    assert handed == [[1], [0]]
    assert all(isinstance(g, Generated) for g in out)
    assert [g.token_ids for g in out] == [[5, 6], [7]]
    assert [g.finish_reason for g in out] == ["stop", "stop"]


def test_the_caller_asks_which_rows_were_cancelled_while_they_run() -> None:
    job = _job(2)
    asked = threading.Event()

    def loop() -> None:  # ends row 1 only once the caller said it was cancelled
        deadline = time.monotonic() + 5
        while 1 not in job.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        asked.set()
        _finish(job, 1, [])
        _finish(job, 0, [4])

    threading.Thread(target=loop).start()
    job.wait(None, lambda: {1}, None, cancel_check_s=0.02)
    assert asked.is_set() and job.cancelled == frozenset({1})


def test_a_failed_pass_raises_on_the_callers_thread() -> None:
    job = _job(1)
    job.error = RuntimeError("CUDA out of memory")
    job.events.put(None)
    with pytest.raises(RuntimeError, match="out of memory"):
        job.wait(None, None, None, cancel_check_s=0.2)


def test_a_resumed_row_prefills_what_it_has_so_far_and_ranks_default_to_one() -> None:
    job = _job(2)
    assert context_of(job, 0) == [1, 2, 3]
    job.rows[0].ids = [9, 8]
    assert context_of(job, 0) == [1, 2, 3, 9, 8]
    assert LiveRow(job, 0, position=5).row is job.rows[0]
    assert [rank((job, 0)), rank((job, 1))] == [0, 2]
    job.ranks = []
    assert rank((job, 1)) == 1
