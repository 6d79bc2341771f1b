"""The cache lookups of one call of the client, by key."""

from __future__ import annotations

from headrace.cache.store import Hit, TieredCache


class Lookups:
    """The cache lookups of one call, by key: a text repeated in one ``submit_many`` is
    looked up once, so its copies are sent together even if the first is answered (and
    cached) before the last is sent."""

    def __init__(self) -> None:
        self._hits: dict[str, Hit | None] = {}
        self._generations: dict[tuple[str, ...], dict[str, int] | None] = {}

    def hit(self, cache: TieredCache, key: str) -> Hit | None:
        if key not in self._hits:
            self._hits[key] = cache.get(key)
        return self._hits[key]

    def generations(self, cache: TieredCache, scopes: list[str]) -> dict[str, int] | None:
        key = tuple(scopes)
        if key not in self._generations:
            self._generations[key] = cache.generations(scopes)
        found = self._generations[key]
        return None if found is None else dict(found)  # each request its own copy
