"""The submitting half of a bulk job's run (``JobRunner`` collects): the input streamed
again, each line not yet answered prepared (a chunk at a time: the tokenizer is much faster
on a batch) and produced as one request (``<job>-<line>``), at most ``window`` in the air.
A line the SDK refuses (too long, empty, unknown model) is answered on the error spool."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from headrace.config.settings import Settings
from headrace.jobs.files import Spool, read_lines
from headrace.jobs.formats import InputFormat, Work, failure_line, parse_line
from headrace.jobs.progress import Progress
from headrace.jobs.tables import Job
from headrace.producers.client import Client
from headrace.schemas.errors import ErrorInfo, InvalidRequestError
from headrace.schemas.messages import Request
from headrace.schemas.params import GenerateParams

if TYPE_CHECKING:
    from headrace.jobs.run_options import RunOptions

log = logging.getLogger(__name__)

PREPARE_CHUNK = 256


def request_id(job_id: str, line: int) -> str:
    return f"{job_id}-{line}"


def input_format(job: Job) -> InputFormat:
    return "plain" if job.input_format == "plain" else "openai"


class Submitter:
    def __init__(
        self,
        job: Job,
        client: Client,
        state: Progress,
        errors: Spool,
        settings: Settings,
        options: RunOptions,
        stop: threading.Event,
    ) -> None:
        self.job = job
        self.client = client
        self.state = state
        self.errors = errors
        self.settings = settings
        self.options = options
        self.stop = stop

    def run(self) -> None:
        """Submit every pending line; an error is left on ``state.submit_error`` for the
        collector to raise at its next checkpoint."""
        job, state = self.job, self.state
        started = time.monotonic()
        try:
            chunk: list[Work] = []
            for work in self._pending_work():
                chunk.append(work)
                if len(chunk) == PREPARE_CHUNK:
                    self._submit_chunk(chunk)
                    chunk = []
                if self.stop.is_set():
                    return
            self._submit_chunk(chunk)
            state.all_submitted()
            took = time.monotonic() - started
            log.info(
                "job %s: submitted %d requests in %.2f s (%.0f/s)",
                job.id,
                state.submitted_count,
                took,
                state.submitted_count / max(took, 1e-9),
            )
        except Exception as exc:  # the collector raises it at its next checkpoint
            log.exception("submitting job %s failed", job.id)
            state.submit_error = exc

    def _pending_work(self) -> Iterator[Work]:
        job = self.job
        for n, raw in enumerate(read_lines(job.input_location, self.settings), start=1):
            if self.state.is_answered(n):
                continue
            parsed = parse_line(raw, n, input_format(job), job.endpoint)
            if isinstance(parsed, Work):
                yield parsed

    def _submit_chunk(self, chunk: list[Work]) -> None:
        if not chunk:
            return
        job, client, state = self.job, self.client, self.state
        prepared: list[tuple[Work, Request, int]] = []
        groups: dict[tuple[str, GenerateParams | None], list[Work]] = {}
        for work in chunk:  # a prepare call takes one model and one set of parameters
            groups.setdefault((work.model or job.model, work.generation), []).append(work)
        for (model, generation), works in groups.items():
            try:  # the whole chunk at once (the tokenizer is much faster on a batch) ...
                ready = client.prepare(
                    [w.text for w in works],
                    model=model,
                    request_ids=[request_id(job.id, w.line) for w in works],
                    truncate=self.options.truncate,
                    generation=generation,
                )
                prepared += [(w, r, b) for w, (r, b) in zip(works, ready, strict=True)]
                continue
            except InvalidRequestError:
                pass
            for work in works:  # ... else one by one: a bad text fails its own line only
                try:
                    [(request, bucket)] = client.prepare(
                        [work.text],
                        model=model,
                        request_ids=[request_id(job.id, work.line)],
                        truncate=self.options.truncate,
                        generation=generation,
                    )
                except InvalidRequestError as exc:
                    error = ErrorInfo(code=exc.code, message=str(exc))
                    rid = request_id(job.id, work.line)
                    out = failure_line(job.id, work.line, work.custom_id, rid, error)
                    state.answer(work.line, out, self.errors, failed=True)
                    continue
                prepared.append((work, request, bucket))
        for work, request, bucket in prepared:
            if not state.has_room(self.options.window):
                client.flush()  # what waits for room must be on the broker, not in a buffer
                if not state.wait_for_room(self.options.window, self.stop):
                    return
            client.send_nowait(request, bucket)
            state.submitted(work.line)
        client.flush()
