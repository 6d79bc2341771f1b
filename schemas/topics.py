"""Topic and queue names, all derived from one prefix."""

from __future__ import annotations

import re
from dataclasses import dataclass

_REQUEST_TOPIC = re.compile(r"^(?P<prefix>.+)\.requests\.b(?P<bucket>\d+)$")


@dataclass(frozen=True)
class Topics:
    prefix: str

    def requests(self, bucket: int) -> str:
        """Kafka topic carrying requests of at most ``bucket`` tokens."""
        return f"{self.prefix}.requests.b{bucket}"

    @property
    def ingress(self) -> str:
        """The unbucketed way in, for producers that cannot count tokens: the dispatcher
        counts them and forwards each request to its bucket topic."""
        return f"{self.prefix}.requests"

    def replies(self, name: str = "default") -> str:
        return f"{self.prefix}.replies.{name}"

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

    def queue(self, bucket: int) -> str:
        """Celery queue (Redis list) that carries this bucket's batches."""
        return f"{self.prefix}.b{bucket}"

    def bucket_of(self, topic: str) -> int:
        match = _REQUEST_TOPIC.match(topic)
        if match is None or match["prefix"] != self.prefix:
            raise ValueError(f"{topic!r} is not a request topic of prefix {self.prefix!r}")
        return int(match["bucket"])
