"""What the workers say of themselves in Redis, read for the core once a second (the shell's
housekeeping): the live workers of each bucket (their heartbeats), which worker runs each
batch in flight, and each live worker's version, memory plan, slots and the task bodies it
reads."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from headrace.workers import task_body
from headrace.workers.dispatcher.events import WorkersSeen
from headrace.workers.ledger import Ledger

log = logging.getLogger(__name__)

BEATS_BEFORE_DEAD = 3  # heartbeats a worker may miss before it counts as gone


class WorkersWatch:
    def __init__(self, ledger: Ledger, buckets: list[int], heartbeat_s: float) -> None:
        self.ledger = ledger
        self.buckets = buckets
        self.heartbeat_s = heartbeat_s
        self._plans: dict[str, Mapping[int, int]] = {}  # the plans last seen (logged on change)
        self.framed = False  # every live worker reads framed task bodies (task_body)

    def read(self, in_flight: list[str]) -> WorkersSeen:
        """Every bucket's live workers, the runner of each batch of ``in_flight``, and what
        the live workers say of themselves."""
        live = self.ledger.live_workers(self.buckets, BEATS_BEFORE_DEAD * self.heartbeat_s)
        runners = dict(zip(in_flight, self.ledger.runners(in_flight), strict=True))
        every = set().union(*live.values())
        info = self.ledger.worker_info(sorted(every))
        plans = {w: _rows(i.get("plan")) for w, i in info.items()}
        self.framed = bool(every) and all(_reads_framed(info.get(w, {})) for w in every)
        if plans != self._plans:
            log.info("worker plans read: %s", {w: dict(p) for w, p in sorted(plans.items())})
            self._plans = dict(plans)
        return WorkersSeen(
            {b: frozenset(w) for b, w in live.items()},
            runners,
            versions={w: str(i["version"]) for w, i in info.items() if "version" in i},
            plans=plans,
            slots={w: _slots(i.get("slots")) for w, i in info.items()},
        )


def _reads_framed(info: Mapping[str, object]) -> bool:
    """Whether a worker said it reads framed task bodies (one of an older release says
    nothing, and is sent plain JSON)."""
    reads = info.get(task_body.WORKER_READS)
    return isinstance(reads, list) and task_body.SERIALIZER in reads


def _slots(said: object) -> int:
    """How many batches a worker said it holds at once (anything else: 1)."""
    return said if isinstance(said, int) and said > 0 else 1


def _rows(plan: object) -> dict[int, int]:
    """A worker's plan as it said it (JSON: bucket names are strings): bucket -> rows."""
    if not isinstance(plan, dict):
        return {}
    return {int(b): int(n) for b, n in plan.items() if str(b).isdigit() and int(n) > 0}
