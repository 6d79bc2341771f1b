"""The hand-off protocol on the local stack's Redis: a batch goes to an idle worker of its
queue, one worker takes one batch per idle spell, and a worker that leaves gives back what
its inbox holds."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis

from headrace import connections
from headrace.config.settings import Settings
from headrace.schemas.messages import Batch
from headrace.workers.handoff import HandOff, Inbox
from tests.workers.batches import make_batch

pytestmark = pytest.mark.usefixtures("stack")


@pytest.fixture
def client() -> redis.Redis:
    return connections.redis_client(Settings())


@pytest.fixture
def prefix() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def batch(prefix: str) -> Batch:
    return make_batch(prefix, ["a lone request"], Settings().model)


def test_a_batch_goes_to_an_idle_worker_of_its_queue_once(client: redis.Redis, prefix: str) -> None:
    offers = HandOff(client, prefix)
    mine = Inbox(client, prefix, "w1", ["q.b32", "q.b64"])
    other = Inbox(client, prefix, "w2", ["q.b128"])
    sent = batch(prefix)
    assert offers.offer(sent, "q.b64") is None  # nobody said it is idle yet
    mine.ready()
    other.ready()
    assert offers.offer(sent, "q.b256") is None  # nobody serves that queue
    assert offers.offer(sent, "q.b64") == "w1"
    assert offers.offer(sent, "q.b64") is None  # its token was taken: one batch per spell
    got = mine.take(1.0)
    assert got is not None and got.queue == "q.b64"
    assert got.batch() == sent
    assert mine.take(0.1) is None
    assert offers.offer(sent, "q.b128") == "w2"  # the other worker is still idle


def test_a_worker_is_idle_only_until_its_token_runs_out_or_it_turns_busy(
    client: redis.Redis, prefix: str
) -> None:
    offers = HandOff(client, prefix)
    inbox = Inbox(client, prefix, "w1", ["q"])
    index = f"{prefix}:handoff:index:q"
    inbox.ready(token_ms=100)
    time.sleep(0.2)  # it stopped saying so (killed, stuck): nothing is handed to it
    assert offers.offer(batch(prefix), "q") is None
    assert not client.sismember(index, "w1")  # and a dead one's id does not stay
    inbox.ready()
    inbox.busy()  # a Celery task started
    assert offers.offer(batch(prefix), "q") is None
    inbox.ready()  # idle again: back in the index
    assert offers.offer(batch(prefix), "q") == "w1"


def test_a_worker_that_leaves_gives_back_its_inbox_and_is_offered_nothing_more(
    client: redis.Redis, prefix: str
) -> None:
    offers = HandOff(client, prefix)
    inbox = Inbox(client, prefix, "w1", ["q"])
    inbox.ready()
    first = batch(prefix)
    assert offers.offer(first, "q") == "w1"
    inbox.ready()
    left = inbox.leave()
    assert [(e.queue, e.batch()) for e in left] == [("q", first)]
    assert offers.offer(batch(prefix), "q") is None
    assert inbox.take(0.1) is None


def test_two_dispatchers_offering_at_once_never_give_one_worker_two_batches(
    client: redis.Redis, prefix: str
) -> None:
    inboxes = [Inbox(client, prefix, f"w{i}", ["q"]) for i in range(3)]
    for inbox in inboxes:
        inbox.ready()
    taken: list[str | None] = []
    lock = threading.Lock()

    def offer_many() -> None:
        offers = HandOff(connections.redis_client(Settings()), prefix)
        for _ in range(5):
            worker = offers.offer(batch(prefix), "q")
            with lock:
                taken.append(worker)

    threads = [threading.Thread(target=offer_many) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    given = [w for w in taken if w is not None]
    assert sorted(given) == ["w0", "w1", "w2"]  # each idle worker once, the rest to Celery
    assert taken.count(None) == 7
