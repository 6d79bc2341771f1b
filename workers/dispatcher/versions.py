"""Which model version serves each request of a batch, for the dispatcher's core (pure).

The shell tells it the model's stable version and traffic policy (``TrafficSeen``, about once
a second) and which version each live worker serves (``WorkersSeen``). A ready batch is cut
by version (``assign``: split, canary, sticky subjects; a version with no live worker for the
bucket gives way to the stable one; with the stable one without a live worker too, to the
model's previous stable version: the degradation ladder's first rung) and each part goes to
its version's queue. Requests the
policy shadows are also copied, once, to the shadow version's queue when it has a live
worker there. Told of no version (unit tests of delivery), batches go to unversioned queues.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from headrace.models.traffic import TrafficPolicy, assign, shadowed
from headrace.workers.dispatcher.flights import Pending


class Versions:
    def __init__(self, fallback_allowed: bool = True) -> None:
        self.fallback_allowed = fallback_allowed  # "fallback_version" is a rung of the ladder
        self.stable: str | None = None
        self.policy: TrafficPolicy | None = None
        self.revision = 0
        self._live: dict[int, frozenset[str]] = {}  # bucket -> versions with a live worker

    def seen_policy(self, stable: str, policy: TrafficPolicy | None, revision: int) -> None:
        self.stable, self.policy, self.revision = stable, policy, revision

    def seen_workers(self, live: Mapping[int, frozenset[str]], versions: Mapping[str, str]) -> None:
        """``live``: each bucket's live workers; ``versions``: worker -> the version it serves
        (a worker that says none serves the stable version)."""
        self._live = {
            bucket: frozenset(versions.get(w, self.stable or "") for w in workers)
            for bucket, workers in live.items()
        }

    def live(self, bucket: int) -> frozenset[str]:
        return self._live.get(bucket, frozenset())

    def split(
        self, bucket: int, pendings: Sequence[Pending]
    ) -> list[tuple[str | None, list[Pending]]]:
        """The batch cut into (version, its requests), in the order versions first appear."""
        if self.stable is None:
            return [(None, list(pendings))]
        if self.policy is None:
            return [(self.stable, list(pendings))]
        live = self.live(bucket)
        fallback = self.fallback_for(bucket)
        parts: dict[str, list[Pending]] = {}
        for p in pendings:
            request = p.item.request
            version = assign(
                self.policy, request.tenant, request.request_id, request.routing_key, live
            )
            if fallback is not None and version not in live:
                version = fallback  # the ladder's first rung (Outgoing marks its replies)
            parts.setdefault(version, []).append(p)
        return list(parts.items())

    def fallback_for(self, bucket: int) -> str | None:
        """The degradation ladder's first rung: the model's previous stable version when it
        has a live worker for ``bucket`` and the stable version has none (None otherwise)."""
        if self.policy is None or not self.fallback_allowed:
            return None
        previous, live = self.policy.previous_stable, self.live(bucket)
        if previous is None or previous not in live or self.policy.stable in live:
            return None
        return previous

    def shadow_of(self, bucket: int, served_by: str, pending: Pending) -> str | None:
        """The shadow version that also computes ``pending`` (it has a live worker for the
        bucket and the policy samples this request), if any."""
        if self.policy is None or self.policy.shadow is None:
            return None
        if pending.failures or pending.deferrals:  # sent again: copied the first time
            return None
        request = pending.item.request
        version = shadowed(self.policy, request.tenant, request.request_id, served_by)
        return version if version is not None and version in self.live(bucket) else None
