"""Run one bulk job through the pipeline: validate, submit, collect, finalize.

- **validating**: the input is streamed once; invalid lines go to the error spool with their
  line number and reason; each valid line's custom_id goes to an on-disk index.
- **in_progress**: a submitter thread streams the input again and produces one request per
  valid line (request id ``<job>-<line>``, reply topic of its own) while at most ``window``
  are unanswered; the collector reads the job's reply topic and appends an output or error
  line per reply. Every ``checkpoint_s`` the spools are fsynced, then the reply offset and
  counts are written to the job store, in that order: a killed run resumes from there, reads
  the line numbers already answered back from its spools and skips them.
- **finalizing**: the spools are delivered to the output and error locations.
- **cancelling**: no more requests are submitted; the unanswered ones are cancelled through
  the control topic and their replies awaited (up to ``cancel_wait_s``), then cancelled.

A run holds the job's lease (``jobs/lease.py``), renewed at every checkpoint: a second
runner refuses the job while it is held (``LeaseHeld``); a runner that died lets it run out,
and any runner (``jobs/pool.py``) takes the job over from its progress record. A runner that
lost its lease stops writing and leaves the job to the new holder (``LeaseLost``).

Memory stays flat: lines are streamed, the answered set is a bitmap (``jobs/progress.py``),
custom_ids are read from the on-disk index, and only ``window`` requests are in the air.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from headrace.config.settings import Settings
from headrace.health.endpoint import mark_ready
from headrace.jobs.bulk_metrics import DISK_FULL_STOPS
from headrace.jobs.files import DiskFull, Spool, disk_full, read_lines
from headrace.jobs.finish import end_job
from headrace.jobs.formats import (
    Invalid,
    expired_line,
    failure_line,
    invalid_line,
    parse_line,
    success_line,
    tokens_of,
)
from headrace.jobs.index import CustomIds
from headrace.jobs.lease import Halted, Lease, LeaseLost, runner_id
from headrace.jobs.lifecycle import FINAL, IllegalTransition, JobStatus
from headrace.jobs.progress import Progress
from headrace.jobs.run_options import RunOptions
from headrace.jobs.single import job_object
from headrace.jobs.store import Counts, JobStore
from headrace.jobs.submitter import Submitter, input_format, request_id
from headrace.jobs.tables import Job
from headrace.jobs.webhooks import notify
from headrace.producers.client import Client
from headrace.schemas.messages import final_reply
from headrace.schemas.topics import Topics
from headrace.transport import open_transport

log = logging.getLogger(__name__)


def reply_topic(settings_prefix: str, job_id: str) -> str:
    return Topics(settings_prefix).replies(f"job-{job_id}")


class JobRunner:
    def __init__(
        self,
        store: JobStore,
        job_id: str,
        settings: Settings,
        options: RunOptions | None = None,
        on_progress: Callable[[Job, Counts], None] | None = None,
        owner: str | None = None,
        halt: threading.Event | None = None,
    ) -> None:
        """``owner``: this runner's name in the job's lease (unique per runner). ``halt``:
        set, the run stops at its next checkpoint and leaves the job to another runner."""
        self.store = store
        self.halt = halt or threading.Event()
        self.job_id = job_id
        self.settings = settings
        self.options = options or RunOptions.of(settings)
        self.on_progress = on_progress
        job = store.get(job_id)
        self.spool_dir = Path(job.spool_dir)
        self.topic = reply_topic(self.settings.topic_prefix, job_id)
        self.lease = Lease(store, job_id, owner or runner_id(), self.options.lease_s)
        self.stopped_for_room = False  # the last run stopped for a full disk

    # --- the whole run ---------------------------------------------------------------------
    def run(self) -> Job:
        """Carry the job out to its end; ``LeaseHeld`` if another runner holds it,
        ``LeaseLost`` (the job left as it is, to its new holder) if this one lost it. Halted,
        or stopped by a full disk, it returns the job as it stands, checkpointed."""
        job = self.store.get(self.job_id)
        if job.state in FINAL:
            return job
        self.lease.take(force=self.options.take_over)
        self.stopped_for_room = waiting_for_room = False
        try:
            return self._run(job)
        except LeaseLost:
            log.warning("job %s: lease lost; another runner carries it on", self.job_id)
            raise
        except Halted:
            log.info("job %s: halted at a checkpoint; any runner carries it on", self.job_id)
            return self.store.get(self.job_id)
        except DiskFull as exc:
            self.stopped_for_room = True
            waiting_for_room = self._stop_for_room(exc)
            return self.store.get(self.job_id)
        finally:
            if not waiting_for_room:
                with contextlib.suppress(Exception):  # the lease runs out by itself anyway
                    self.lease.release()

    def run_to_end(self) -> Job:
        """``run``, and again after every stop for a full disk (a runner on its own, as
        ``batch create --wait`` and ``batch run`` start; a pool tries again by itself)."""
        while True:
            job = self.run()
            if not self.stopped_for_room or self.halt.is_set():
                return job
            self.halt.wait(self.options.disk_full_retry_s)

    def _stop_for_room(self, exc: DiskFull) -> bool:
        """The job's disk is full: say so in the job's errors and hold its lease for
        ``job_disk_full_retry_s``; then any pool carries it on from its last checkpoint (what
        was answered since is read again from the reply topic). False if the lease is gone."""
        retry_s = self.options.disk_full_retry_s
        DISK_FULL_STOPS.inc()
        note = f"{exc}: stopped at its last checkpoint, carried on after {retry_s:g} s"
        log.warning("job %s: %s", self.job_id, note)
        self.store.add_error(self.job_id, "disk_full", note)
        return self.store.renew(self.job_id, self.lease.owner, retry_s)

    def _run(self, job: Job) -> Job:
        try:
            if job.state is JobStatus.validating:
                job = self._validate(job)
            if job.state is JobStatus.cancelling and job.in_progress_at is None:
                job = self._end(job, JobStatus.cancelled)  # cancelled before any submission
            finalizing = job.finalizing_at is not None  # a cancel may land while finalizing
            if job.state in (JobStatus.in_progress, JobStatus.cancelling) and not finalizing:
                job = self._process(job)
            if job.state in (JobStatus.finalizing, JobStatus.cancelling):
                job = self._finalize(job)
        except (LeaseLost, Halted, DiskFull):
            raise  # the job is another runner's to end (and notify), or waits for room
        except Exception as exc:
            if disk_full(exc):  # the index, or a delivery to a local file
                raise DiskFull(f"no space left on device: {exc}") from exc
            log.exception("job %s failed", self.job_id)
            current = self.store.get(self.job_id)
            if current.state not in FINAL:
                job = self.store.move(self.job_id, JobStatus.failed, f"{type(exc).__name__}: {exc}")
            self._maybe_notify()
            raise
        self._maybe_notify()
        return job

    def _maybe_notify(self) -> None:
        """A single job with a webhook: POST its final view once it ended."""
        job = self.store.get(self.job_id)
        url = job.metadata_.get("webhook_url")
        if url and job.state in FINAL:
            notify(url, job_object(job), job.tenant, self.settings)

    # --- validating -----------------------------------------------------------------------
    def _validate(self, job: Job) -> Job:
        errors_path = self.spool_dir / "errors.jsonl"
        errors_path.unlink(missing_ok=True)  # a validation cut short starts over
        errors = Spool(errors_path, guard=self.lease.guard)
        ids = CustomIds(self.spool_dir, create=True)
        total = invalid = 0
        try:
            for n, raw in enumerate(read_lines(job.input_location, self.settings), start=1):
                total = n
                if n % 10_000 == 0:
                    self.lease.renew()
                parsed = parse_line(raw, n, input_format(job), job.endpoint)
                if isinstance(parsed, Invalid):
                    invalid += 1
                    errors.append(invalid_line(job.id, parsed))
                    ids.add(n, parsed.custom_id or "")
                else:
                    ids.add(n, parsed.custom_id)
        finally:
            ids.close()
            errors.close()
        self.store.set_fields(job.id, total=total, failed=invalid, completed=0)
        if total == 0:
            return self.store.move(job.id, JobStatus.failed, "the input file has no lines")
        try:
            return self.store.move(job.id, JobStatus.in_progress)
        except IllegalTransition:  # cancelled while validating
            return self.store.get(job.id)

    # --- in_progress ----------------------------------------------------------------------
    def _process(self, job: Job) -> Job:
        mark_ready()  # /readyz: submitting and collecting
        outputs = Spool(self.spool_dir / "output.jsonl", guard=self.lease.guard)
        errors = Spool(self.spool_dir / "errors.jsonl", guard=self.lease.guard)
        ids = CustomIds(self.spool_dir)
        state = Progress(job.total)
        for spool, failed in ((outputs, False), (errors, True)):
            for text in spool.lines():
                state.mark_from_output(text, failed)
        transport = open_transport(self.settings)
        client = Client(
            self.settings,
            tenant=job.tenant,
            reply_topic=self.topic,
            listen=False,
            transport=transport,
            lane=self.options.lane,
        )
        stop = threading.Event()
        submission = Submitter(job, client, state, errors, self.settings, self.options, stop)
        submitter = threading.Thread(target=submission.run, name=f"submit-{job.id}", daemon=True)
        replies = transport.reader()
        [partition] = replies.assign([self.topic])  # the job's own topic: one partition
        offset = job.reply_offset
        replies.seek(partition, offset)
        submitter.start()

        def stop_submitting() -> None:
            """No more submissions; the requests in the air are cancelled."""
            stop.set()
            submitter.join()
            ids = [request_id(job.id, n) for n in state.unanswered_submitted()]
            client.cancel_many(ids, tenant=job.tenant)
            self.lease.renew()

        cancel_started: float | None = None
        expired = False
        last_checkpoint = time.monotonic()
        try:
            while not state.done():
                for records in replies.poll(timeout_ms=200).values():
                    for record in records:
                        offset = record.offset + 1
                        self._collect(job, record.value, state, outputs, errors, ids)
                now = time.monotonic()
                if now - last_checkpoint < self.options.checkpoint_s:
                    continue
                last_checkpoint = now
                if state.submit_error is not None:
                    raise state.submit_error
                self._checkpoint(job, state, outputs, errors, offset)
                if self.halt.is_set():
                    stop.set()
                    raise Halted(job.id)
                current = self.store.get(job.id)
                if current.state is JobStatus.cancelling:
                    if cancel_started is None:
                        cancel_started = now
                        stop_submitting()
                    if not state.unanswered_submitted() or (
                        now - cancel_started > self.options.cancel_wait_s
                    ):
                        break
                late = job.expires_at is not None and datetime.now(UTC) > job.expires_at
                if late and cancel_started is None:
                    stop_submitting()
                    for n in state.unanswered():
                        state.answer(n, expired_line(job.id, n, ids.get(n)), errors, failed=True)
                    expired = True
                    break
            self._checkpoint(job, state, outputs, errors, offset)
        finally:
            stop.set()
            submitter.join(timeout=5)
            replies.close()
            client.close()
            outputs.close()
            errors.close()
            ids.close()
        if expired:
            return self._end(job, JobStatus.expired)
        try:
            return self.store.move(job.id, JobStatus.finalizing)
        except IllegalTransition:  # cancelled
            return self._end(job, JobStatus.cancelled)

    def _collect(
        self,
        job: Job,
        value: bytes | None,
        state: Progress,
        outputs: Spool,
        errors: Spool,
        ids: CustomIds,
    ) -> None:
        reply = final_reply(value or b"")
        if reply is None:
            log.warning("job %s: a record on its reply topic that is no reply; skipped", job.id)
            return
        prefix, _, tail = reply.request_id.rpartition("-")
        if prefix != job.id or not tail.isdigit():
            return
        if reply.tenant != job.tenant:  # anybody may write the topic: only its tenant's count
            log.warning("job %s: a reply for tenant %r on its topic; skipped", job.id, reply.tenant)
            return
        line = int(tail)
        if state.is_answered(line) or not 1 <= line <= job.total:
            return  # a duplicate, or a reply the spools already hold
        custom_id = ids.get(line)
        if reply.result is not None:
            out = success_line(
                job.id, line, custom_id, reply.request_id, reply.model, reply.result, job.endpoint
            )
            state.answer(line, out, outputs, failed=False, tokens=tokens_of(reply.result))
        else:
            assert reply.error is not None
            state.answer(
                line,
                failure_line(job.id, line, custom_id, reply.request_id, reply.error),
                errors,
                failed=True,
            )

    def _checkpoint(
        self, job: Job, state: Progress, outputs: Spool, errors: Spool, offset: int
    ) -> None:
        self.lease.renew()
        with state.lock:
            outputs.checkpoint()
            errors.checkpoint()
            counts = state.counts()
            tokens = state.input_tokens, state.output_tokens
        self.store.set_fields(
            job.id,
            completed=counts.completed,
            failed=counts.failed,
            input_tokens=tokens[0],
            output_tokens=tokens[1],
            reply_offset=offset,
        )
        if self.on_progress is not None:
            self.on_progress(job, counts)

    # --- finalizing -----------------------------------------------------------------------
    def _finalize(self, job: Job) -> Job:
        """Deliver the output; completed, or cancelled if a cancel landed meanwhile."""
        try:
            return self._end(job, JobStatus.completed)
        except IllegalTransition:
            return self._end(job, JobStatus.cancelled)

    def _end(self, job: Job, target: JobStatus) -> Job:
        self.lease.renew()
        return end_job(self.store, self.settings, job, target)
