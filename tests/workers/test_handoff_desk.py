"""The worker's hand-off desk on the local stack's Redis: idle only while no Celery task
runs and nothing handed over computes; what its inbox holds when it stops goes back."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from headrace.schemas.messages import Batch
from headrace.workers.handoff import Entry, HandOff, Inbox
from headrace.workers.handoff_desk import Desk
from tests.eventually import eventually
from tests.workers.test_handoff import batch, client, prefix

__all__ = ["client", "prefix"]  # fixtures

pytestmark = pytest.mark.usefixtures("stack")


def test_the_desk_is_idle_between_tasks_runs_what_it_is_handed_and_gives_back_the_rest(
    client: redis.Redis, prefix: str
) -> None:
    offers = HandOff(client, prefix)
    first, second, third, left = (batch(prefix) for _ in range(4))
    holds = {first.batch_id: threading.Event(), third.batch_id: threading.Event()}
    ran: list[Batch] = []
    given_back: list[Entry] = []

    def run(entry: Entry) -> None:
        got = entry.batch()
        ran.append(got)
        if got.batch_id in holds:  # computing: no token meanwhile
            holds[got.batch_id].wait(10)

    prepared: list[str] = []
    desk = Desk(
        Inbox(client, prefix, "w1", ["q"]),
        run,
        given_back.append,
        wait_s=0.1,
        prepare=lambda: prepared.append(threading.current_thread().name),
    )
    desk.start()
    assert eventually(lambda: offers.offer(first, "q") == "w1", timeout_s=5)
    assert prepared == ["handoff"]  # on its own thread, once, before it was first idle
    assert eventually(lambda: ran == [first], timeout_s=5)
    assert offers.offer(second, "q") is None  # busy with what it was handed
    desk.task_started()  # a Celery task too: not idle until it ends
    holds[first.batch_id].set()
    time.sleep(0.3)
    assert offers.offer(second, "q") is None
    desk.task_ended()
    assert eventually(lambda: offers.offer(second, "q") == "w1", timeout_s=5)
    assert eventually(lambda: offers.offer(third, "q") == "w1", timeout_s=5)
    assert eventually(lambda: ran == [first, second, third], timeout_s=5)
    # handed over while the desk computes, and the worker stops meanwhile: given back
    client.rpush(f"{prefix}:handoff:inbox:w1", f"q\n{left.model_dump_json()}")
    closing = threading.Thread(target=desk.close)
    closing.start()
    time.sleep(0.2)
    holds[third.batch_id].set()
    closing.join(10)
    assert ran == [first, second, third]
    assert [(e.queue, e.batch()) for e in given_back] == [("q", left)]
    assert desk.handled == 3


def test_the_desk_is_idle_again_the_moment_a_celery_task_ends(
    client: redis.Redis, prefix: str
) -> None:
    offers = HandOff(client, prefix)
    ran: list[Batch] = []
    # a long wait on the inbox: without being set idle when the task ends, the worker would
    # stay without a token until this wait is over
    desk = Desk(
        Inbox(client, prefix, "w1", ["q"]),
        lambda e: ran.append(e.batch()),
        lambda _: None,
        wait_s=5.0,
    )
    desk.start()
    try:
        eventually(lambda: client.exists(f"{prefix}:handoff:token:w1"), timeout_s=5)
        desk.task_started()  # a lone request came by Celery
        assert offers.offer(batch(prefix), "q") is None
        desk.task_ended()
        handed = batch(prefix)
        assert offers.offer(handed, "q") == "w1"  # at once, not after the desk's wait
        assert eventually(lambda: ran == [handed], timeout_s=2)
    finally:
        desk.close()
