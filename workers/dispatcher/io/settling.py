"""Reply-topic scans that settle requests, off the dispatcher's poll thread.

Kafka is the truth: a request whose reply is on its reply topic is answered. A scan reads
the reply topics of the requests in question from their start, marks those found answered
in the ledger and hands back a ``Settled`` event. For a dead worker's attempt only the
requests it held as *sending* can have been answered (it died while its replies went out);
its claims are released afterwards so the next attempt can claim them at once.

A scan that fails (broker or Redis away) is tried again until it succeeds or the
dispatcher stops: the requests it holds stay unanswered meanwhile, never lost.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

from tenacity import Retrying, retry_if_exception_type, wait_exponential

from headrace.schemas.messages import final_reply
from headrace.transport.base import Transport
from headrace.workers.dispatcher.events import RequestKey, Settle, Settled
from headrace.workers.ledger import SENDING_PREFIX, Ledger

log = logging.getLogger(__name__)


class Settler:
    def __init__(self, transport: Transport, ledger: Ledger) -> None:
        self.transport = transport
        self.ledger = ledger
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="settle")
        self._done: queue.SimpleQueue[Settled] = queue.SimpleQueue()
        self._stop = threading.Event()

    def submit(self, action: Settle) -> None:
        self._pool.submit(self._run, action)

    def results(self) -> list[Settled]:
        out = []
        while not self._done.empty():
            out.append(self._done.get_nowait())
        return out

    def close(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, action: Settle) -> None:
        retrying = Retrying(
            retry=retry_if_exception_type(Exception),
            wait=wait_exponential(multiplier=0.5, max=10),
            stop=lambda _: self._stop.is_set(),
            before_sleep=lambda state: log.warning(
                "settling %s failed (%r); trying again",
                action.job_id,
                state.outcome.exception() if state.outcome is not None else None,
            ),
            reraise=True,
        )
        try:
            found = retrying(self.settle, action)
        except Exception:
            log.warning("settling %s given up: the dispatcher is stopping", action.job_id)
            return
        self._done.put(Settled(action.job_id, frozenset(found)))

    def settle(self, action: Settle) -> set[RequestKey]:
        wanted = {topic: set(keys) for topic, keys in action.wanted.items()}
        every = [k for keys in wanted.values() for k in keys]
        if action.dead_batch is not None:
            holders = self.ledger.holders(every)
            sending = {
                k for k, h in zip(every, holders, strict=True) if h and h.startswith(SENDING_PREFIX)
            }
            wanted = {t: keys & sending for t, keys in wanted.items() if keys & sending}
        found: set[RequestKey] = set()
        for topic, keys in wanted.items():
            for record in self.transport.scan(topic):
                reply = final_reply(record.value)
                if reply is not None and (reply.tenant, reply.request_id) in keys:
                    found.add((reply.tenant, reply.request_id))
        if wanted:
            log.info(
                "reply scan: %d of %d requests already answered",
                len(found),
                sum(map(len, wanted.values())),
            )
        self.ledger.mark_answered(sorted(found))
        if action.dead_batch is not None:
            self.ledger.release(every, owner=action.dead_batch)
            self.ledger.end_batch(action.dead_batch)
        return found
