"""The transport seam: how the pipeline reads and writes topics (``base``), with
kafka-python behind it by default (``kafka``) and an in-process one for unit tests
(``memory``)."""

from __future__ import annotations

from headrace.config.settings import Settings
from headrace.transport.base import (
    Delivered,
    DeliveryError,
    Guarantees,
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
from headrace.transport.guarantees import BROKER_GUARANTEES, guarantees_of

__all__ = [
    "BROKER_GUARANTEES",
    "Delivered",
    "DeliveryError",
    "Guarantees",
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
    "guarantees_of",
    "open_transport",
]


def open_transport(settings: Settings) -> Transport:
    """The transport ``settings.transport`` names (kafka-python: the only one today)."""
    from headrace.transport.kafka.transport import KafkaTransport

    return KafkaTransport(settings)
