"""A batch handed straight to an idle worker, past Celery's round trip (a lone request's
path; issue 35).

A worker with nothing to compute says so in Redis: a **token** key with a short expiry, set
again while it waits on its **inbox** list, and its id in the **index** set of each queue it
serves (the online lane's, for its buckets and model version), both in one transaction. The
dispatcher **offers** an online batch: one Lua script takes the token of a worker in the
queue's index (``DEL`` is the take: of two dispatchers, one gets the worker) and pushes the
batch on that worker's inbox; a member it finds without a token (busy, gone) it drops from
the index, so the index holds about the idle workers and a dead one's id does not stay.
No idle worker: the offer says so and the batch goes by Celery, as every batch did before.

What it costs a request to be handed off instead of queued: nothing is lost that the Celery
path keeps. A worker killed with a batch in its inbox is a batch whose runner died: the
dispatcher knows the runner from the offer and sends the batch again once the worker stops
beating (``recovery.runners_seen``), and the ledger's claims keep a second attempt from
replying twice. A worker that stops on purpose hands what its inbox holds back to Celery.

Keys (``prefix`` is the topic prefix): ``{prefix}:handoff:index:{queue}`` (set),
``{prefix}:handoff:token:{worker}``, ``{prefix}:handoff:inbox:{worker}`` (list of
``queue \\n batch JSON``). The script names the token and inbox keys it touches from the
index it reads, so it needs one Redis, not a cluster (as the project's Redis is).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import redis

from headrace.schemas.messages import Batch
from headrace.schemas.wire import batch_body

TOKEN_MS = 2_000  # an idle worker's token lives this long unless set again
INBOX_MS = 120_000  # a dead worker's inbox is dropped this long after its last batch

# KEYS[1]: the queue's index; ARGV: the key prefix, the entry (queue \n batch), INBOX_MS,
# a random number. The first worker of the index, from a place the number picks (so idle
# workers share lone requests), whose token this call deletes gets the entry; none: false.
# Members passed over had no token: out of the index until they say they are idle again.
_OFFER = """
local workers = redis.call('SMEMBERS', KEYS[1])
local n = #workers
for i = 0, n - 1 do
  local worker = workers[(tonumber(ARGV[4]) + i) % n + 1]
  if redis.call('DEL', ARGV[1] .. 'token:' .. worker) == 1 then
    local inbox = ARGV[1] .. 'inbox:' .. worker
    redis.call('RPUSH', inbox, ARGV[2])
    redis.call('PEXPIRE', inbox, ARGV[3])
    return worker
  end
  redis.call('SREM', KEYS[1], worker)
end
return false
"""


def _base(prefix: str) -> str:
    return f"{prefix}:handoff:"


def _index(prefix: str, queue: str) -> str:
    return f"{_base(prefix)}index:{queue}"


@dataclass(frozen=True)
class Entry:
    """A batch taken from an inbox, with the Celery queue it would have gone to."""

    queue: str
    batch_json: str

    def batch(self) -> Batch:
        return Batch.model_validate_json(self.batch_json)


def _entry(raw: bytes | str) -> Entry:
    text = raw.decode() if isinstance(raw, bytes) else raw
    queue, _, batch_json = text.partition("\n")
    return Entry(queue, batch_json)


class HandOff:
    """The dispatcher's side: offer a batch to an idle worker of its queue."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.redis = client
        self.prefix = prefix
        self._offer = client.register_script(_OFFER)

    def offer(self, batch: Batch, queue: str) -> str | None:
        """The worker the batch went to, or None (no worker of ``queue`` is idle)."""
        entry = f"{queue}\n{batch_body(batch)}"
        worker = self._offer(
            keys=[_index(self.prefix, queue)],
            args=[_base(self.prefix), entry, INBOX_MS, random.randrange(1 << 30)],
        )
        if worker is None:
            return None
        return worker.decode() if isinstance(worker, bytes) else str(worker)


class Inbox:
    """A worker's side: be found idle, take what is handed over, leave."""

    def __init__(self, client: redis.Redis, prefix: str, worker_id: str, queues: list[str]):
        self.redis = client
        base = _base(prefix)
        self._index = [_index(prefix, q) for q in queues]
        self._token = f"{base}token:{worker_id}"
        self._inbox = f"{base}inbox:{worker_id}"
        self.worker_id = worker_id

    def ready(self, token_ms: int = TOKEN_MS) -> None:
        """Idle for ``token_ms`` from now: a dispatcher may hand it a batch (in every index
        of its queues and its token set, at once: an offer sees both or neither)."""
        pipe = self.redis.pipeline(transaction=True)
        for index in self._index:
            pipe.sadd(index, self.worker_id)
        pipe.set(self._token, "1", px=token_ms)
        pipe.execute()

    def busy(self) -> None:
        """Not idle (a batch came by Celery)."""
        self.redis.delete(self._token)

    def take(self, timeout_s: float) -> Entry | None:
        """The next batch handed over, waiting at most ``timeout_s``."""
        got = self.redis.blpop([self._inbox], timeout=timeout_s)
        return None if got is None else _entry(got[1])

    def leave(self) -> list[Entry]:
        """Out of every index, not idle, and what the inbox still holds (to send by Celery)."""
        pipe = self.redis.pipeline(transaction=True)
        for index in self._index:
            pipe.srem(index, self.worker_id)
        pipe.delete(self._token)
        pipe.lrange(self._inbox, 0, -1)
        pipe.delete(self._inbox)
        left = pipe.execute()[-2]
        return [_entry(raw) for raw in left]
