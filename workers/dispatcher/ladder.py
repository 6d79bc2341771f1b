"""The degradation ladder (seed 001 §3.4), for the dispatcher's core: pure, no IO.

A request goes on the ladder when its bucket cannot serve it well:

- ``no_workers``: the bucket had live workers and has had none for ``degrade_after_s``;
- ``failing``: the bucket's model-error rate opened its breaker (``breaker_*``);
- ``late``: the work queued before it in its bucket needs longer than its deadline leaves.

Each clears by itself (a worker beats again, the breaker's cooldown ends and requests go
through, the backlog drains), and requests are computed again as before. On the ladder a
request takes the first rung that can serve it, in ``degrade_rungs`` order:

1. ``fallback_version``: the model's previous stable version computes it. Its trigger is
   narrower: the stable version has no live worker for the bucket while the previous one has
   (``Versions.fallback_for``); it needs no decision here.
2. ``cache``: a cached result for it (an embedding request that asked for caching), even a
   stale one (expired or invalidated since), marked so. The shell looks it up off its loop.
3. ``canned``: the answer configured for the model (``degrade_canned``).
4. ``reject``: the typed error it got before the ladder existed (``unavailable``; a late
   request: ``deadline_exceeded``).

A tenant in ``degrade_opt_out`` skips the rungs that answer with anything but its own
model's computation: it gets the reject at once. The reply says which rung served it
(``Reply.degraded``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from headrace.config.faults import DegradeRung
from headrace.config.settings import default
from headrace.schemas.errors import ErrorCode, ErrorInfo
from headrace.schemas.messages import EmbeddingResult, GenerationResult, Request
from headrace.schemas.results import Result, ScoreResult

Reason = Literal["no_workers", "failing", "late"]
RUNGS: tuple[DegradeRung, ...] = ("fallback_version", "cache", "canned", "reject")


@dataclass(frozen=True)
class LadderPolicy:
    rungs: tuple[DegradeRung, ...] = RUNGS
    canned: Mapping[str, Result] = field(default_factory=dict)  # model -> its canned answer
    opt_out: frozenset[str] = frozenset()  # tenants that get the reject at once
    # a request is late when the bucket's queued work needs more than this times what its
    # deadline leaves (0: never)
    late_factor: float = default("degrade_late_factor")


@dataclass(frozen=True)
class Descent:
    """What the ladder does with one request, below the fallback version: look the cache up
    (``cache``), else answer with ``canned`` if there is one, else with ``error``."""

    reason: Reason
    cache: bool
    canned: Result | None
    error: ErrorInfo


def descend(policy: LadderPolicy, request: Request, reason: Reason, why: str) -> Descent:
    """The rungs below the fallback version left for ``request`` (``why``: the reject's
    message)."""
    code = ErrorCode.deadline_exceeded if reason == "late" else ErrorCode.unavailable
    error = ErrorInfo(code=code, message=why)
    if request.tenant in policy.opt_out:
        return Descent(reason, cache=False, canned=None, error=error)
    # a request with a cache directive is one whose result may repeat (an embedding, or a
    # deterministic generation: the client gives no other a directive)
    cache = "cache" in policy.rungs and request.cache is not None
    canned = policy.canned.get(request.model) if "canned" in policy.rungs else None
    if canned is not None and not _fits(canned, request):
        canned = None
    return Descent(reason, cache=cache, canned=canned, error=error)


def late(policy: LadderPolicy, queued_s: float | None, left_s: float | None) -> bool:
    """Would the request wait past its deadline? ``queued_s``: what the bucket's queued work
    needs (None: not known yet); ``left_s``: what its deadline leaves (None: no deadline)."""
    if policy.late_factor <= 0 or queued_s is None or left_s is None:
        return False
    return queued_s > policy.late_factor * max(0.0, left_s)


def _fits(result: Result, request: Request) -> bool:
    """A canned answer of the request's kind (an embedding for embed, text for generate,
    scores for rerank and classify)."""
    kind = {"embed": EmbeddingResult, "generate": GenerationResult}.get(request.task, ScoreResult)
    return isinstance(result, kind)
