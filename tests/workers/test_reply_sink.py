"""A worker's reply sinks on the local broker: the batch threads' sinks (``sibling``) share
one producer, and each flush tells its thread where its own replies landed, every reply
in the topic once."""

from __future__ import annotations

import collections
import threading

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import Reply
from headrace.schemas.topics import Topics
from headrace.transport.base import Delivered
from tests.integration.topics import read_topic
from tests.workers.batches import runner_sink

THREADS = 8
BATCHES = 5
ROWS = 4


def test_batch_threads_sinks_share_one_producer_and_each_learns_of_its_own_replies(
    stack: LocalStack, prefix: str
) -> None:
    settings = Settings(topic_prefix=prefix)
    topic = Topics(prefix).replies("runner")
    root = runner_sink(settings)
    sinks = [root.sibling() for _ in range(THREADS)]
    landed: dict[int, list[list[Delivered]]] = {}
    errors: list[BaseException] = []

    def batches(n: int) -> None:
        try:
            landed[n] = []
            for b in range(BATCHES):
                for r in range(ROWS):
                    reply = Reply.failure(
                        f"t{n}-b{b}-r{r}", "runner", "m", ErrorCode.model_error, "x"
                    )
                    sinks[n].send(topic, reply)
                sinks[n].push()
                landed[n].append(sinks[n].flush())
        except BaseException as exc:  # the assertion below says which
            errors.append(exc)

    threads = [threading.Thread(target=batches, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert not errors, errors
    assert len({id(s.out.producer) for s in [root, *sinks]}) == 1  # one connection
    for n, flushes in landed.items():
        for b, delivered in enumerate(flushes):  # each flush: its own batch's rows, no other
            assert sorted(d.key for d in delivered) == [
                f"t{n}-b{b}-r{r}".encode() for r in range(ROWS)
            ]
    counts = collections.Counter(record.key for record in read_topic(settings, topic))
    assert len(counts) == THREADS * BATCHES * ROWS and set(counts.values()) == {1}
