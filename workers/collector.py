"""The garbage collector of the dispatcher and worker processes, set once they have started:
loops that allocate a few objects per request (a parsed request, its batch item, its reply)
and keep few of them.

CPython collects its youngest generation every 700 new container objects, and each full
collection walks every object alive. The dispatcher: the modules, the tokenizer, the
settings, every request waiting in a batch; `./dev bench-dispatcher` measured that at 10-15
us of a request's ~60 (parsing, where most objects are made, took twice as long with the
collector on). A worker holds its model (torch's and transformers' objects: 478k tracked
after loading MiniLM): one full collection while it parsed a 1,000-row batch took **378 ms**
(40 parses: p50 5.4 ms, mean 16.2 without; 5.2 / 6.7 ms, no full collection, with these
settings), the host stalled and a GPU idle meanwhile. Reference counting frees almost all
of these objects anyway; the collector is only for cycles.
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
