"""Topic and queue names, all derived from one prefix.

Requests ride one of two lanes with the same buckets: ``online`` (``<prefix>.requests.b16``,
queue ``<prefix>.b16``) and ``bulk`` (``<prefix>.requests.b16.bulk``, queue
``<prefix>.b16.bulk``), which the dispatcher serves with the capacity online leaves. A
pipeline's batches go to the queues of the model version that serves them
(``<prefix>.b16@v2``, ``<prefix>.b16.bulk@v2``), read by that version's workers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

Lane = Literal["online", "bulk"]
LANES: tuple[Lane, ...] = get_args(Lane)
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")  # what Kafka accepts as a topic name
_REQUEST_TOPIC = re.compile(r"^(?P<prefix>.+)\.requests\.b(?P<bucket>\d+)(?P<bulk>\.bulk)?$")


@dataclass(frozen=True)
class Topics:
    prefix: str

    def requests(self, bucket: int, lane: Lane = "online") -> str:
        """Kafka topic carrying requests of at most ``bucket`` tokens, of ``lane``."""
        online = f"{self.prefix}.requests.b{bucket}"
        return online if lane == "online" else f"{online}.bulk"

    @property
    def ingress(self) -> str:
        """The unbucketed way in, for producers that cannot count tokens: the dispatcher
        counts them and forwards each request to its bucket topic."""
        return f"{self.prefix}.requests"

    def replies(self, name: str = "default") -> str:
        return f"{self.prefix}.replies.{name}"

    def is_reply_topic(self, topic: str) -> bool:
        """Whether ``topic`` is one of this prefix's reply topics (``<prefix>.replies.<name>``,
        a legal Kafka name): the only topics a request's ``reply_to`` may name."""
        name = topic.removeprefix(f"{self.prefix}.replies.")
        return name != topic and _TOPIC_NAME.fullmatch(topic) is not None and bool(name)

    @property
    def dead_letter(self) -> str:
        return f"{self.prefix}.dead-letter"

    @property
    def control(self) -> str:
        """Cancellations (and later other control records) for this prefix."""
        return f"{self.prefix}.control"

    @property
    def invalidate(self) -> str:
        """Explicit cache invalidations (schemas.cache.Invalidation)."""
        return f"{self.prefix}.invalidate"

    def queue(self, bucket: int, lane: Lane = "online", version: str | None = None) -> str:
        """Celery queue (Redis list) that carries this bucket's batches of ``lane`` for the
        model ``version`` (None: a queue of no version, for a core told of none)."""
        online = f"{self.prefix}.b{bucket}"
        name = online if lane == "online" else f"{online}.bulk"
        return name if version is None else f"{name}@{version}"

    def bucket_of(self, topic: str) -> int:
        return int(self._match(topic)["bucket"])

    def lane_of(self, topic: str) -> Lane:
        return "bulk" if self._match(topic)["bulk"] else "online"

    def _match(self, topic: str) -> re.Match[str]:
        match = _REQUEST_TOPIC.match(topic)
        if match is None or match["prefix"] != self.prefix:
            raise ValueError(f"{topic!r} is not a request topic of prefix {self.prefix!r}")
        return match
