"""The worker's hand-off desk on the local stack's Redis: idle only while no Celery task
runs and nothing handed over computes (idle again once a batch's replies are sent); what its
inbox holds when it stops goes back."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

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

    def run(entry: Entry, _sent: Callable[[], None]) -> None:
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
    assert not desk.idle.is_set()
    assert desk.start().idle.wait(5)  # what the worker waits for before it says it is ready
    assert offers.offer(first, "q") == "w1"
    assert prepared == ["handoff"]  # on its own thread, once, before it was first idle
    assert eventually(lambda: ran == [first], timeout_s=5)
    assert offers.offer(second, "q") is None  # busy with what it was handed
    ended = desk.task_started()  # a Celery task too: not idle until it ends
    holds[first.batch_id].set()
    time.sleep(0.3)
    assert offers.offer(second, "q") is None
    ended()
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
        lambda e, _sent: ran.append(e.batch()),
        lambda _: None,
        wait_s=5.0,
    )
    desk.start()
    try:
        eventually(lambda: client.exists(f"{prefix}:handoff:token:w1"), timeout_s=5)
        ended = desk.task_started()  # a lone request came by Celery
        assert offers.offer(batch(prefix), "q") is None
        ended()
        handed = batch(prefix)
        assert offers.offer(handed, "q") == "w1"  # at once, not after the desk's wait
        assert eventually(lambda: ran == [handed], timeout_s=2)
        ended()  # a task's end said twice (its replies sent, then its return) counts once
        again = desk.task_started()
        assert offers.offer(batch(prefix), "q") is None
        again()
        assert offers.offer(batch(prefix), "q") == "w1"
    finally:
        desk.close()


def test_the_desk_is_idle_once_a_batch_s_replies_are_sent_and_takes_one_batch_at_a_time(
    client: redis.Redis, prefix: str
) -> None:
    """A batch handed over says when its replies are sent; the worker is idle from then
    while the batch's bookkeeping goes on, and the batch handed to it meanwhile is the only
    one until it runs (the desk does not set its token again over the one an offer took)."""
    offers = HandOff(client, prefix)
    first, second, third = (batch(prefix) for _ in range(3))
    bookkeeping, computing = threading.Event(), threading.Event()
    ran: list[Batch] = []

    def run(entry: Entry, sent: Callable[[], None]) -> None:
        got = entry.batch()
        ran.append(got)
        if got.batch_id == first.batch_id:
            sent()
            bookkeeping.wait(10)
        elif got.batch_id == second.batch_id:
            computing.wait(10)

    desk = Desk(Inbox(client, prefix, "w1", ["q"]), run, lambda _: None, wait_s=0.1)
    desk.start()
    try:
        assert eventually(lambda: offers.offer(first, "q") == "w1", timeout_s=5)
        assert eventually(lambda: ran == [first], timeout_s=5)
        assert eventually(lambda: offers.offer(second, "q") == "w1", timeout_s=2)
        bookkeeping.set()
        assert eventually(lambda: ran == [first, second], timeout_s=5)
        time.sleep(0.3)  # a few of the desk's waits' length
        assert offers.offer(third, "q") is None  # computing the second
        computing.set()
        assert eventually(lambda: offers.offer(third, "q") == "w1", timeout_s=5)
        assert eventually(lambda: ran == [first, second, third], timeout_s=5)
    finally:
        desk.close()
