"""Single jobs (``POST /v1/jobs``) carried out by a runner pool, without a process or a topic
of their own: every single job's request is answered on one shared reply topic
(``<prefix>.replies.jobs-<store>``, one per job store), which the pools read in one consumer
group.

- **submitting**: the pool that claims a job (its lease) produces its one request
  (``<job>-1``, on the bulk lane: a job waits for online traffic) and holds the lease while
  it waits; a pool that died lets the lease run out, and the next one produces it again
  (the same request id: the pipeline answers it once).
- **collecting**: whichever pool reads the shared topic writes the reply as the job's output
  (or error) file, ends the job, and calls its webhook; the offset is committed after, so a
  reply is never lost with a pool that dies, and one collected twice changes nothing (the
  job has ended; the file is written whole, by rename).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from headrace.config.settings import Settings
from headrace.jobs.finish import end_job
from headrace.jobs.formats import Invalid, failure_line, invalid_line, parse_line, success_line
from headrace.jobs.lifecycle import FINAL, IllegalTransition, JobStatus
from headrace.jobs.single import job_object
from headrace.jobs.store import JobStore
from headrace.jobs.submitter import request_id
from headrace.jobs.tables import Job
from headrace.jobs.webhooks import notify
from headrace.producers.client import Client
from headrace.schemas.errors import ErrorInfo, InvalidRequestError
from headrace.schemas.messages import Reply, final_reply
from headrace.schemas.topics import Topics
from headrace.transport import Partition, Transport

log = logging.getLogger(__name__)

CUSTOM_ID = "job"


def shared_topic(settings: Settings) -> str:
    """One per job store (pools of one store share it; another store's never mixes in)."""
    store = hashlib.sha256(settings.sql_url.encode()).hexdigest()[:8]
    return Topics(settings.topic_prefix).replies(f"jobs-{store}")


class SingleJobs:
    def __init__(self, store: JobStore, settings: Settings, transport: Transport) -> None:
        self.store = store
        self.settings = settings
        self.topic = shared_topic(settings)
        transport.ensure_topics([self.topic], partitions=1)
        self.client = Client(
            settings, reply_topic=self.topic, listen=False, transport=transport, lane="bulk"
        )
        self.reader = transport.reader(f"{self.topic}.collectors")
        self.reader.subscribe([self.topic], self)
        self.submitted: dict[str, float] = {}  # job id -> when produced (monotonic)
        self._hooks = ThreadPoolExecutor(4, thread_name_prefix="webhook")  # retries wait

    # --- submitting (the lease holder) ---------------------------------------------------------
    def submit(self, job: Job) -> None:
        """Produce the job's request (again, after a takeover or a broker that lost it)."""
        raw = Path(job.input_location).read_text(encoding="utf-8").splitlines()[0]
        work = parse_line(raw, 1, "openai", job.endpoint)
        if isinstance(work, Invalid):  # checked at POST: only a file changed since
            self._write(job, None, invalid_line(job.id, work))
            self._end(job)
            return
        rid = request_id(job.id, 1)
        try:
            [(request, bucket)] = self.client.prepare(
                [work.text], model=work.model or job.model, request_ids=[rid],
                generation=work.generation,
            )  # fmt: skip
        except InvalidRequestError as exc:
            error = ErrorInfo(code=exc.code, message=str(exc))
            self._write(job, None, failure_line(job.id, 1, CUSTOM_ID, rid, error))
            self._end(job)
            return
        self.client.send_nowait(request.model_copy(update={"tenant": job.tenant}), bucket)
        self.client.flush()
        if job.state is JobStatus.validating:
            self.store.set_fields(job.id, total=1)
            self.store.move(job.id, JobStatus.in_progress)
        self.submitted[job.id] = time.monotonic()

    def due_again(self, resend_after_s: float | None) -> list[str]:
        """Jobs this pool produced whose reply is overdue (a broker that lost the record)."""
        if resend_after_s is None:
            return []
        now = time.monotonic()
        return [j for j, at in self.submitted.items() if now - at > resend_after_s]

    # --- collecting (whoever reads the shared topic) ---------------------------------------
    def collect(self, timeout_ms: int = 200) -> int:
        """Read replies; each ends its job. Returns how many jobs ended here."""
        ended = 0
        polled = self.reader.poll(timeout_ms)
        for partition, records in polled.items():
            done = records[0].offset
            try:
                for record in records:
                    ended += self._collect(record.value)
                    done = record.offset + 1
            finally:
                if done > records[0].offset:
                    self.reader.commit({partition: done})
                if done <= records[-1].offset:  # one failed (a full disk): read it again
                    self.reader.seek(partition, done)
        return ended

    def _collect(self, value: bytes | None) -> int:
        reply = final_reply(value or b"")
        if reply is None:
            return 0
        job_id, _, line = reply.request_id.rpartition("-")
        if line != "1":
            return 0
        try:
            job = self.store.get(job_id, reply.tenant)
        except LookupError:
            return 0
        self.submitted.pop(job_id, None)
        if job.state in FINAL:
            return 0  # answered already (a second copy, or another pool was first)
        self._write(job, reply, None)
        return self._end(job)

    def _write(self, job: Job, reply: Reply | None, line: str | None) -> None:
        """The job's one line as its output or error file, whole (written, then renamed)."""
        rid = request_id(job.id, 1)
        if reply is not None and reply.result is not None:
            line = success_line(job.id, 1, CUSTOM_ID, rid, reply.model, reply.result, job.endpoint)
            name, other = "output.jsonl", "errors.jsonl"
        else:
            if reply is not None:
                assert reply.error is not None
                line = failure_line(job.id, 1, CUSTOM_ID, rid, reply.error)
            name, other = "errors.jsonl", "output.jsonl"
        assert line is not None
        spool_dir = Path(job.spool_dir)
        spool_dir.mkdir(parents=True, exist_ok=True)
        partial = spool_dir / f".{name}.partial"
        partial.write_text(line + "\n", encoding="utf-8")
        os.replace(partial, spool_dir / name)
        (spool_dir / other).unlink(missing_ok=True)
        ok = name == "output.jsonl"
        self.store.set_fields(job.id, total=1, completed=int(ok), failed=int(not ok))

    def _end(self, job: Job) -> int:
        try:
            if job.state is not JobStatus.in_progress:
                job = self.store.move(job.id, JobStatus.in_progress)
            self.store.move(job.id, JobStatus.finalizing)
            job = end_job(self.store, self.settings, self.store.get(job.id), JobStatus.completed)
        except IllegalTransition:
            return 0  # another pool ended it meanwhile: it notifies
        url = job.metadata_.get("webhook_url")
        if url:
            self._hooks.submit(notify, url, job_object(job), job.tenant, self.settings)
        return 1

    # --- the group (a Rebalance listener) ------------------------------------------------------
    def assigned(self, partitions: list[Partition]) -> None:
        log.info("collecting single jobs from %s", partitions)

    def revoked(self, partitions: list[Partition]) -> None:
        pass

    def lost(self, partitions: list[Partition]) -> None:
        pass

    def close(self) -> None:
        self._hooks.shutdown(wait=True)
        self.reader.close()
        self.client.close()
