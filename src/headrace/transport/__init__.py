"""The transport seam: how the pipeline reads and writes topics (``base``), with
kafka-python behind it by default (``kafka``) and an in-process one for unit tests
(``memory``)."""

from __future__ import annotations

from headrace.config.settings import Settings
from headrace.transport.base import (
    Delivered,
    DeliveryError,
    Headers,
    Partition,
    Reader,
    Rebalance,
    Record,
    Reset,
    Start,
    Transport,
    TransportError,
    UnsupportedClientError,
    Writer,
)

__all__ = [
    "Delivered",
    "DeliveryError",
    "Headers",
    "Partition",
    "Reader",
    "Rebalance",
    "Record",
    "Reset",
    "Start",
    "Transport",
    "TransportError",
    "UnsupportedClientError",
    "Writer",
    "open_transport",
]


def open_transport(settings: Settings) -> Transport:
    """The transport ``settings.transport`` names (kafka-python: the only one today)."""
    from headrace.transport.kafka.transport import KafkaTransport

    return KafkaTransport(settings)
