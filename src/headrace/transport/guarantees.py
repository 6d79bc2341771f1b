"""What each broker the kafka transport talks to promises (``broker_flavor``), known without
connecting (``guarantees_of``): pure, so that policy may ask it."""

from __future__ import annotations

from headrace.config.settings import Settings
from headrace.transport.base import Guarantees

# what each broker the kafka transport talks to promises (``broker_flavor``)
BROKER_GUARANTEES = {
    # tansu, the local stack's: has lost acknowledged writes; no transactions
    "tansu": Guarantees(loses_acked_records=True, contiguous_offsets=True),
    # Apache Kafka with acks=all loses no acknowledged record; transactions leave gaps
    "kafka": Guarantees(loses_acked_records=False, contiguous_offsets=False),
}


def guarantees_of(settings: Settings) -> Guarantees:
    """What the transport ``settings`` configure promises, without connecting."""
    return BROKER_GUARANTEES[settings.broker_flavor]


def resend_after_s(after_s: float | None, guarantees: Guarantees) -> float | None:
    """When an unanswered request is produced again: after ``after_s``
    (``client_resend_after_s``), only where the broker may lose an acknowledged one."""
    return after_s if guarantees.loses_acked_records else None
