"""The dispatcher process's garbage collector, set for a loop that allocates a few objects
per request (a parsed request, its record's reference, its batch item) and keeps them until
their batch is answered.

CPython collects its youngest generation every 700 new container objects, and each full
collection walks every object alive (the modules, the tokenizer, the settings, every request
waiting in a batch). `./dev bench-dispatcher` measured that at 10-15 us of a request's ~60
(parsing, where most objects are made, took twice as long with the collector on). Reference
counting frees almost all of these objects anyway; the collector is only for cycles.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000  # new container objects between collections of the youngest generation


def tune_collector() -> None:
    """What is alive now (the process's start: modules, settings, clients) moves to the
    permanent generation, which no collection walks again; the youngest generation is
    collected every ``YOUNG_THRESHOLD`` allocations instead of 700 (the older ones as
    before, in proportion)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
