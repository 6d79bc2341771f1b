"""Shared machinery of the fault-injection suite: submit many requests, inject one fault,
wait for every reply, then count what the reply topic really holds."""

from __future__ import annotations

import collections
import itertools
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import redis

from headrace import connections
from headrace.config.settings import Settings
from headrace.ops.processes import Pipeline
from headrace.ops.sample_texts import long_tail_texts
from headrace.producers.client import Client
from headrace.producers.submission import Submission
from headrace.schemas.messages import Reply
from headrace.schemas.topics import Topics
from headrace.workers.ledger import RedisLedger
from tests.conftest import pipeline_env
from tests.eventually import eventually
from tests.integration.topics import read_topic

# Requests in flight per fault: 600 by default, a fifth answered before the fault and the
# rest (seconds of the model's compute on 2 cores) in flight when it lands. The runs in
# docs/faults.md's table used 2,000 (two to three minutes a fault on a slow 2-core machine,
# most of it the model's compute, not the fault): HEADRACE_FAULT_REQUESTS=2000 for those.
FAULT_REQUESTS = int(os.environ.get("HEADRACE_FAULT_REQUESTS", "600"))
REPORT = Path(os.environ.get("HEADRACE_STATE_DIR", ".headrace")) / "faults" / "report.jsonl"
# Faster failure detection than the defaults, so the suite fits in CI: workers beat every
# 0.5 s (dead after 1.5 s) and a lost batch's lease is 10 s.
FAST_FAULTS = {"HEADRACE_WORKER_HEARTBEAT_S": "0.5", "HEADRACE_LEASE_BASE_S": "10"}


def fault_texts(count: int = FAULT_REQUESTS, seed: int = 5) -> list[str]:
    return [t[:300] for t in long_tail_texts(count, seed=seed)]


@dataclass
class Outcome:
    fault: str
    requests: int
    replies: int
    duplicates: int
    lost: int
    recovery_s: float
    errors: dict[str, int] = field(default_factory=dict)
    # from the fault to the last reply: how long the pipeline needed to answer everything
    all_answered_s: float = float("nan")
    # requests whose reply the client never saw (lost on the topic, or a short read of it)
    client_missing: int = 0
    # lost requests by their claim in the ledger: "answered" means a reply was acknowledged
    # by the broker (the mark is set only after a successful flush) and is not on the topic
    lost_claims: dict[str, int] = field(default_factory=dict)
    # lost requests whose request record is on a request topic (the dispatcher could read it)
    lost_requests_on_topic: int = 0
    resent: int = 0  # requests the client produced again (not answered in client_resend_after_s)
    last_reply_at: float = float("nan")  # time.monotonic() of the last reply
    # from the fault's end (a recover that returns when it ended, e.g. S3 back, a restarted
    # process ready) to the first reply after it: how soon replies flowed again; and the
    # longest stretch without a reply from then on
    flowing_again_s: float = float("nan")
    longest_gap_after_s: float = float("nan")

    def assert_clean(self) -> None:
        """No duplicates, nothing lost: also where the broker lost acknowledged writes
        (tansu on S3 storage has), since the client resends what it was not answered, and
        a reply the ledger has as answered that is not where the broker acknowledged it is
        answered again. The figures say what was lost and how far it got."""
        assert self.duplicates == 0, self
        assert self.lost == 0, self

    def record(self) -> None:
        REPORT.parent.mkdir(parents=True, exist_ok=True)
        with REPORT.open("a") as out:
            out.write(json.dumps({**asdict(self), "at": time.time()}) + "\n")


class Run:
    """Requests in flight, with the time each reply arrived."""

    def __init__(self, client: Client, texts: Sequence[str]) -> None:
        self.client = client
        self._lock = threading.Lock()
        self.arrivals: list[float] = []
        self.submissions: list[Submission] = client.submit_many(texts)
        for s in self.submissions:
            s.future.add_done_callback(self._arrived)

    def _arrived(self, _: object) -> None:
        with self._lock:
            self.arrivals.append(time.monotonic())

    def answered(self) -> int:
        with self._lock:
            return len(self.arrivals)

    def wait_for(self, count: int, timeout_s: float = 120) -> None:
        eventually(
            lambda: self.answered() >= count,
            timeout_s,
            f"{count} replies (only {self.answered()} so far)",
            every_s=0.02,
        )

    def replies(self, timeout_s: float = 300) -> list[Reply | None]:
        """Each request's reply, None where none came within ``timeout_s`` (counted as lost
        on the topic afterwards, so a failure still records its row in the table)."""
        deadline = time.monotonic() + timeout_s
        out: list[Reply | None] = []
        for s in self.submissions:
            try:
                out.append(s.future.result(timeout=max(0.0, deadline - time.monotonic())))
            except TimeoutError:
                out.append(None)
        return out

    def last_reply_at(self) -> float:
        with self._lock:
            return max(self.arrivals, default=float("nan"))

    def all_answered_s(self, fault_at: float) -> float:
        """From the fault to the last reply (0 if every reply came before it)."""
        with self._lock:
            last = max(self.arrivals, default=float("nan"))
        return max(0.0, last - fault_at)

    def first_reply_after(self, at: float) -> float:
        """Seconds from ``at`` to the first reply after it (nan if none came)."""
        with self._lock:
            return min((t for t in self.arrivals if t >= at), default=float("nan")) - at

    def recovery_s(self, fault_at: float) -> float:
        """The longest stretch without a reply from the fault on: how long the pipeline
        stalled before it served again (0 if it never paused)."""
        with self._lock:
            times = sorted(t for t in self.arrivals if t >= fault_at)
        if not times:
            return float("nan")
        edges = [fault_at, *times]
        return max(b - a for a, b in itertools.pairwise(edges))


def count_on_topic(
    settings: Settings,
    topic: str,
    ids: set[str],
    fault: str,
    recovery_s: float,
    replies: Sequence[Reply | None] = (),
    tenant: str = "faults",
    all_answered_s: float = float("nan"),
    add_row: bool = True,
) -> Outcome:
    """Count the replies the topic really holds for ``ids`` (``replies``: what the client
    received, None where nothing came; ``tenant``: theirs, to look lost ones up);
    ``add_row``: add the row to the report now (False: the caller adds more first)."""
    time.sleep(1.0)  # anything late would land now
    counts: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    for record in read_topic(settings, topic):
        reply = Reply.model_validate_json(record.value)
        if reply.request_id in ids:
            counts[reply.request_id] += 1
            if reply.error is not None:
                errors[reply.error.code.value] += 1
    lost = sorted(ids - set(counts))
    outcome = Outcome(
        fault=fault,
        requests=len(ids),
        replies=sum(counts.values()),
        duplicates=sum(c - 1 for c in counts.values() if c > 1),
        lost=len(lost),
        recovery_s=round(recovery_s, 2),
        errors=dict(errors),
        all_answered_s=round(all_answered_s, 2),
        client_missing=sum(1 for r in replies if r is None),
        lost_claims=claims_of(settings, tenant, lost),
        lost_requests_on_topic=requests_on_topics(settings, set(lost)),
    )
    if add_row:
        outcome.record()
    return outcome


def requests_on_topics(settings: Settings, request_ids: set[str]) -> int:
    """How many of ``request_ids`` have a request record on a bucket topic."""
    if not request_ids:
        return 0
    topics = Topics(settings.topic_prefix)
    found: set[str] = set()
    for bucket in settings.buckets:
        for record in read_topic(settings, topics.requests(bucket)):
            try:
                request_id = json.loads(record.value)["request_id"]
            except (ValueError, KeyError, TypeError):
                continue
            if request_id in request_ids:
                found.add(request_id)
    return len(found)


def claims_of(settings: Settings, tenant: str, request_ids: list[str]) -> dict[str, int]:
    """How many of ``request_ids`` the ledger has as answered, claimed (by an owner or
    while sending) or unknown."""
    if not request_ids:
        return {}
    try:
        ledger = RedisLedger(connections.redis_client(settings), settings.topic_prefix, 60)
        holders = ledger.holders([(tenant, r) for r in request_ids])
    except redis.RedisError as exc:
        return {f"ledger unreadable: {exc}": len(request_ids)}
    return dict(collections.Counter(_claim_kind(h) for h in holders))


def _claim_kind(holder: str | None) -> str:
    if holder is None:
        return "unknown"
    if holder == "answered":
        return "answered"
    return "sending" if holder.startswith("sending:") else "claimed"


def print_log_tails(pipeline: Pipeline, lines: int = 40) -> None:
    """The end of each process's log, shown by pytest with a failing test's output, after
    the dispatcher's partition positions (SIGUSR2) and thread stacks (SIGUSR1: faulthandler),
    to see what a wedged one waits on."""
    if pipeline.dispatcher.alive():
        os.kill(pipeline.dispatcher.pid, signal.SIGUSR2)  # its partitions' positions
        time.sleep(1.5)
        os.kill(pipeline.dispatcher.pid, signal.SIGUSR1)
        time.sleep(1.0)
        lines = max(lines, 150)
    for proc in [*pipeline.dispatchers, *pipeline.workers]:
        text = (
            proc.log_path.read_text(errors="replace").splitlines() if proc.log_path.exists() else []
        )
        print(f"--- {proc.name}: last {lines} lines of {proc.log_path}")
        print("\n".join(text[-lines:]))


def assert_serves(client: Client, pipeline: Pipeline, timeout_s: float = 30) -> None:
    """No process stayed wedged: all are alive and a new request is answered."""
    dead = [p.name for p in [*pipeline.dispatchers, *pipeline.workers] if not p.alive()]
    assert not dead, f"processes died: {dead}"
    probe = client.submit("still serving after the fault?")
    try:
        reply = probe.result(timeout_s)
    except TimeoutError as exc:
        print_log_tails(pipeline)
        settings, request_id = client.settings, probe.request.request_id
        on_reply_topic = sum(
            1
            for r in read_topic(settings, client.reply_topic)
            if Reply.model_validate_json(r.value).request_id == request_id
        )
        raise AssertionError(
            f"the probe got no reply in {timeout_s}s: request on its topic "
            f"{requests_on_topics(settings, {request_id})}, ledger "
            f"{claims_of(settings, client.tenant, [request_id])}, replies on the reply topic "
            f"{on_reply_topic}, client resent {client.resent}"
        ) from exc
    assert reply.result is not None, reply.error


def run_with_fault(
    name: str,
    prefix: str,
    inject: Callable[[Pipeline], object],
    recover: Callable[[Pipeline], object] | None = None,
    *,
    seed: int = 5,
    worker_buckets: list[str] | None = None,
    broker: str | None = None,
    mid_run: bool = True,
    dispatchers: int = 1,
    worker_env: dict[str, str] | None = None,
    client_settings: dict[str, object] | None = None,
    requests: int = FAULT_REQUESTS,
    probe_within_s: float = 30,
    **env: str,
) -> Outcome:
    """Submit ``requests`` requests, ``inject`` the fault once a fifth is answered and
    ``recover`` from it (a supervisor's restart; it may return the time.monotonic() the fault
    ended, for ``flowing_again_s``), then check every request got its result,
    exactly once on the reply topic, and that the pipeline still serves. ``broker``: another
    bootstrap than the stack's, for pipeline and client; ``env``: more pipeline settings;
    ``mid_run``: the fault must land before the last reply, or the run proves nothing;
    ``dispatchers``: how many share the bucket topics (one consumer group); ``worker_env``:
    the workers' settings that differ from the dispatchers'; ``client_settings``: the
    client's that differ from the defaults (a registered model, its registry);
    ``requests``: how many (more for a fault that takes seconds to land);
    ``probe_within_s``: how soon a request sent after the run must be answered."""
    settings = Settings(topic_prefix=prefix, **(client_settings or {}))  # type: ignore[arg-type]
    if broker is not None:  # resend sooner what the broker may have lost
        update = {"kafka_bootstrap": broker, "client_resend_after_s": 20}
        settings = settings.model_copy(update=update)
        env = {**env, "HEADRACE_KAFKA_BOOTSTRAP": broker}
    penv = pipeline_env(prefix, **{**FAST_FAULTS, **env})
    with (
        Pipeline(
            env=penv, worker_buckets=worker_buckets, dispatchers=dispatchers, worker_env=worker_env
        ) as pipeline,
        Client(settings, tenant="faults") as client,
    ):
        run = Run(client, fault_texts(requests, seed=seed))
        run.wait_for(requests // 5)
        fault_at = time.monotonic()
        inject(pipeline)
        if mid_run:
            assert run.answered() < requests, "the fault came too late to prove anything"
        ended = recover(pipeline) if recover is not None else None
        replies = run.replies()
        outcome = count_on_topic(
            settings,
            client.reply_topic,
            {s.request.request_id for s in run.submissions},
            name,
            run.recovery_s(fault_at),
            replies,
            all_answered_s=run.all_answered_s(fault_at),
            add_row=False,
        )
        outcome.resent, outcome.last_reply_at = client.resent, run.last_reply_at()
        if isinstance(ended, float):
            outcome.flowing_again_s = round(run.first_reply_after(ended), 2)
            outcome.longest_gap_after_s = round(run.recovery_s(ended), 2)
        outcome.record()
        if outcome.lost or outcome.duplicates:
            print_log_tails(pipeline)
        assert_serves(client, pipeline, probe_within_s)
    outcome.assert_clean()
    assert all(r is not None and r.result is not None for r in replies), outcome.errors
    return outcome


def answered_once_after_replacement(
    pipeline: Pipeline,
    client: Client,
    submissions: Sequence[Submission],
    fault: str,
    exited_at: float,
    tenant: str,
) -> tuple[float, float]:
    """After a process that ended itself was replaced (just now): every submission answered
    with a result, each exactly once on the reply topic. Returns (seconds from the exit to
    the replacement being ready, seconds from then to the last reply); a row in the table."""
    ready_s = time.monotonic() - exited_at
    replies = [s.result(120) for s in submissions]
    answered_s = time.monotonic() - exited_at - ready_s
    outcome = count_on_topic(
        client.settings,
        client.reply_topic,
        {s.request.request_id for s in submissions},
        fault,
        answered_s,
        replies,
        tenant=tenant,
        all_answered_s=answered_s,
    )
    if outcome.lost or outcome.duplicates:
        print_log_tails(pipeline)
    outcome.assert_clean()
    assert all(r.result is not None for r in replies), [r.error for r in replies]
    return ready_s, answered_s
