"""How many rows a bucket's batch may hold: the smallest memory plan among its live workers
(each worker publishes its plan with its heartbeat)."""

from __future__ import annotations

from collections.abc import Mapping


def row_caps(
    live: Mapping[int, frozenset[str]], plans: Mapping[str, Mapping[int, int]]
) -> dict[int, int | None]:
    """Per bucket, the rows a batch may hold: what the smallest memory plan among the
    bucket's live workers says (None: no live worker has a plan for it)."""
    caps: dict[int, int | None] = {}
    for bucket, workers in live.items():
        said = [plans[w][bucket] for w in workers if bucket in plans.get(w, {})]
        caps[bucket] = max(1, min(said)) if said else None
    return caps
