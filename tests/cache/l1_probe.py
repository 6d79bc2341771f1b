"""A separate process holding an L1: ``python -m tests.cache.l1_probe KEY`` reads KEY into its
L1 (settings from the environment), prints READY, then prints GONE <monotonic time> when an
invalidation broadcast has evicted it."""

from __future__ import annotations

import sys
import time

from headrace.cache.store import open_cache
from headrace.config.settings import Settings


def main(key: str) -> None:
    cache = open_cache(Settings()).listen()
    hit = cache.get(key)
    assert hit is not None and cache.get(key) is not None, "the entry should be in L2"
    print("READY", hit.tier, flush=True)
    assert cache.l1 is not None
    while True:
        with cache._lock:
            present = cache.l1.get(key) is not None
        if not present:
            print(f"GONE {time.monotonic()}", flush=True)
            return
        time.sleep(0.002)


if __name__ == "__main__":
    main(sys.argv[1])
