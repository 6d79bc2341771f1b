"""The kafka-python transport (the default): readers, writers, topic admin and scans on
kafka-python 3.0.12, with every client and broker workaround in this package.

``broker_flavor`` says which broker is on the other side, and so what it guarantees
(``guarantees``, from ``headrace.transport.BROKER_GUARANTEES``: tansu may lose an
acknowledged record, Apache Kafka does not). ``tansu`` (the local stack's) also turns on
what only its fetches need: fetch waits that follow the owner's hints, the stalled-fetch
watch and group rejoin in readers; a writer reads a partition back after an
acknowledgement without an offset where records may be lost. ``kafka`` turns them off.

The kafka-python workarounds (``fixes``, ``diagnostics``, ``clients.set_fetch_wait``) reach
into that client's internals, so the version is checked when a transport opens: another
version fails at once with a message saying what to install, never silently.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

import kafka
from kafka import KafkaAdminClient, KafkaProducer
from kafka.errors import KafkaError

from headrace.config.settings import Settings
from headrace.transport.base import (
    Partition,
    Record,
    Reset,
    TransportError,
    UnsupportedClientError,
)
from headrace.transport.guarantees import guarantees_of
from headrace.transport.kafka import clients
from headrace.transport.kafka.delivery import ReliableProducer
from headrace.transport.kafka.reader import KafkaReader
from headrace.transport.kafka.scan import records_after, records_from_start
from headrace.transport.kafka.shared_producer import SharedProducer

SUPPORTED_VERSIONS = ("3.0.12",)


def check_client_version(version: str | None = None) -> None:
    found = version if version is not None else getattr(kafka, "__version__", "unknown")
    if found not in SUPPORTED_VERSIONS:
        raise UnsupportedClientError(
            f"kafka-python {found} is installed; headrace's kafka transport is written for "
            f"{', '.join(SUPPORTED_VERSIONS)} (its workarounds use that version's internals): "
            f"pip install 'kafka-python=={SUPPORTED_VERSIONS[-1]}'"
        )


class KafkaTransport:
    def __init__(self, settings: Settings) -> None:
        check_client_version()
        self.settings = settings
        self.guarantees = guarantees_of(settings)
        self._admin: KafkaAdminClient | None = None  # for list_topics, opened on first use
        self._shares: dict[bool, SharedProducer] = {}  # shared writers' producer, by idempotence
        self._lock = threading.Lock()

    def reader(
        self,
        group_id: str | None = None,
        *,
        reset: Reset = "beginning",
        max_poll_records: int = 500,
        busy: Callable[[Partition], bool] | None = None,
    ) -> KafkaReader:
        return KafkaReader(
            self.settings, group_id, reset=reset, max_poll_records=max_poll_records, busy=busy
        )

    def writer(
        self, delivery_timeout_s: float, *, idempotent: bool = False, shared: bool = False
    ) -> ReliableProducer:
        settings = self.settings
        overrides = {"enable_idempotence": True} if idempotent else {}

        def readback(topic: str, partition: int, offset: int | None) -> Iterator[Record]:
            return records_after(settings, topic, partition, offset)

        def factory(**more: object) -> KafkaProducer:
            return clients.producer(settings, **overrides, **more)

        share = None
        if shared:
            with self._lock:
                share = self._shares.setdefault(idempotent, SharedProducer(factory))
        return ReliableProducer(
            factory,
            delivery_timeout_s,
            readback=readback if self.guarantees.loses_acked_records else None,
            share=share,
        )

    def list_topics(self) -> set[str]:
        try:
            if self._admin is None:
                self._admin = KafkaAdminClient(**self.settings.kafka_options())
            return set(self._admin.list_topics())
        except KafkaError as exc:
            raise TransportError(f"cannot list topics: {exc!r}") from exc

    def ensure_topics(self, names: Sequence[str], partitions: int | None = None) -> None:
        try:
            clients.ensure_topics(self.settings, names, partitions)
        except KafkaError as exc:
            raise TransportError(f"cannot create topics {list(names)}: {exc!r}") from exc

    def scan(
        self, topic: str, partition: int | None = None, start: int | None = None
    ) -> Iterator[Record]:
        if partition is None:
            return records_from_start(self.settings, topic)
        return records_after(self.settings, topic, partition, start)

    def close(self) -> None:
        """Each reader and writer holds its own connections but shared writers; this closes
        the shared writers' and the one ``list_topics`` opened."""
        with self._lock:
            shares, self._shares = list(self._shares.values()), {}
        for share in shares:
            share.close()
        if self._admin is not None:
            self._admin.close()
            self._admin = None
