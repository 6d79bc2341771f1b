"""Batches handed straight to an idle worker (``workers/handoff.py``), end to end on the
local stack: lone requests take that path; a worker that freezes and is killed with batches
in its inbox loses none of them and answers none twice, and they are answered at its death,
not at the end of their lease."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request
from collections import Counter

import pytest
import redis

from headrace import connections
from headrace.config.settings import Settings
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.producers.submission import Submission
from headrace.schemas.messages import final_reply
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually
from tests.integration.topics import read_topic

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("stack")]

LEASE_S = 30.0  # the default: a batch lost in a queue waits this long to be sent again


def handed_off(pipeline: Pipeline) -> float:
    """The dispatcher's count of batches it handed straight to a worker."""
    text = urllib.request.urlopen(f"{pipeline.metrics_urls[0]}/metrics", timeout=5).read()
    found = re.findall(rb"^headrace_dispatcher_handed_off_total\{[^}]*\} (\S+)$", text, re.M)
    return sum(float(v) for v in found)


def inbox_of(client: redis.Redis, prefix: str, pid: int) -> str:
    """The inbox key of the idle worker process ``pid`` (its id holds its pid)."""

    def found() -> list[str]:
        keys = [k.decode() for k in client.scan_iter(f"{prefix}:handoff:index:*")]
        members = {m.decode() for key in keys for m in client.smembers(key)}
        return [m for m in members if f"-{pid}-" in m]

    (worker,) = eventually(found, timeout_s=10, what=f"worker {pid} idle")
    return f"{prefix}:handoff:inbox:{worker}"


def test_lone_requests_go_straight_to_an_idle_worker() -> None:
    prefix = unique_prefix("handoff")
    with (
        Pipeline(env=pipeline_env(prefix), worker_buckets=["all"], metrics=True) as pipeline,
        Client(Settings(topic_prefix=prefix), tenant="tests") as client,
    ):
        for i in range(10):
            reply = client.submit(f"a lone request, number {i}").result(60)
            assert reply.error is None
        # every one: a worker is ready once its desk is idle, and idle again as soon as the
        # broker has a batch's replies (before, the first and any that came while the worker
        # marked the batch before went by Celery)
        assert handed_off(pipeline) == 10


def test_a_worker_frozen_then_killed_with_batches_in_its_inbox_loses_none() -> None:
    prefix = unique_prefix("handoff-kill")
    settings = Settings(topic_prefix=prefix)
    store = connections.redis_client(settings)
    with (
        Pipeline(env=pipeline_env(prefix), worker_buckets=["all", "all"]) as pipeline,
        Client(settings, tenant="tests") as client,
    ):
        assert client.submit("warm").result(60).error is None
        victim = pipeline.workers[0]
        token = inbox_of(store, prefix, victim.pid).replace(":inbox:", ":token:")
        os.kill(victim.pid, signal.SIGSTOP)  # its idle token stands until it runs out
        stopped = time.monotonic()
        runs_out = stopped + store.pttl(token) / 1000
        submissions: list[Submission] = []
        while store.exists(token) and time.monotonic() < runs_out - 0.2:
            submission = client.submit(f"handed over, maybe to the frozen one {len(submissions)}")
            submissions.append(submission)
            # one at a time: the live worker answers each, so each batch finds an idle
            # worker's token (the live one's or the frozen one's) and none goes by Celery's
            # queue, which the frozen worker's pending fetch could take (that one would be
            # sent again only at the end of its lease: a frozen Celery worker's limit)
            while not submission.future.done() and store.exists(token):
                time.sleep(0.005)
        # only an offer takes the token of a frozen worker before it runs out: a batch went
        # to it (Redis wrote it to the wait it had begun; it is never read)
        assert not store.exists(token) and time.monotonic() < runs_out, (
            "nothing was handed to the frozen worker: the fault did not land"
        )
        victim.kill()  # kill -9: its inbox is never read
        replies = [f.result(LEASE_S) for f in submissions]
        answered_s = time.monotonic() - stopped
        assert all(r.error is None for r in replies), [r.error for r in replies if r.error]
        on_topic = Counter(
            reply.request_id
            for record in read_topic(settings, client.reply_topic)
            if (reply := final_reply(record.value)) is not None
        )
        assert {on_topic[r.request_id] for r in replies} == {1}  # none lost, none twice
        # the dispatcher knew the runner: sent again once it stopped beating (3 beats of
        # 2 s), not at the end of the lease
        assert answered_s < LEASE_S / 2, answered_s
        print(f"{len(submissions)} requests; all answered {answered_s:.1f} s after the freeze")
