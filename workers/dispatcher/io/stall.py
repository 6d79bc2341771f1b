"""The dispatcher's injected stall (``fault_dispatcher_stall_marker``, for tests and drills):
a polled request that holds the marker stops the dispatcher's loop in that pass for good, the
way a client call that never returns would (its loop watch ends such a dispatcher). Apart from
``workers.faults`` (the workers' faults) so the dispatcher imports no model code."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from headrace.transport.base import Partition, Record

log = logging.getLogger(__name__)


def stall_on(marker: str, polled: Mapping[Partition, list[Record]]) -> None:
    """Never returns if a record of ``polled`` holds ``marker``."""
    needle = marker.encode()
    if any(needle in r.value for records in polled.values() for r in records):
        log.error("injected stall: this dispatcher's loop never moves again")
        threading.Event().wait()
