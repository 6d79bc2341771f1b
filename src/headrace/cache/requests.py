"""Where a request meets the cache: its key and scopes (producer and worker compute the same
ones from the request itself; a worker never trusts a key it is handed), and the entry a
worker writes for its result."""

from __future__ import annotations

from headrace.cache.entry import CacheEntry
from headrace.cache.keys import cache_key, entry_scopes
from headrace.config.cache_policy import ExpiryPolicy
from headrace.schemas.messages import GenerationResult, Request
from headrace.schemas.params import GenerateParams
from headrace.schemas.results import Result


def request_key(request: Request, model_version: str) -> str:
    return cache_key(
        request.tenant,
        request.model,
        model_version,
        request.task,
        request.input,
        request.params,
        request.input_ids,
        request.input_pair,
    )


def request_scopes(request: Request, model_version: str) -> list[str]:
    tags = request.cache.tags if request.cache is not None else []
    return entry_scopes(request.tenant, request.model, model_version, tags)


def repeats(request: Request) -> bool:
    """Whether the same request gives the same result: any embedding or score; a generation
    only when deterministic (``GenerateParams.deterministic``) and outside a conversation
    (its history is not in the key)."""
    params = request.params
    if not isinstance(params, GenerateParams):
        return True
    return params.deterministic() and request.session_id is None


def shared_key(request: Request) -> str | None:
    """What makes two requests one computation, whatever the version that computes it: their
    cache key under no version; None for a request no result may serve twice (no cache
    directive, or it does not ``repeat``). Producers key such a request's record by it, so
    identical requests meet in one partition, read by one dispatcher (``coalescing``)."""
    if request.cache is None or not repeats(request):
        return None
    return request_key(request, "")


def cacheable(request: Request, result: Result) -> bool:
    """Whether ``result`` may serve the same request again: the request ``repeats``, and a
    generation was not cut short by a cancel."""
    if not isinstance(result, GenerationResult):  # an embedding, a score: as the input is
        return True
    return repeats(request) and result.finish_reason != "abort"


def result_entry(
    request: Request,
    result: Result,
    model_version: str,
    classes: dict[str, ExpiryPolicy],
    now: float,
    key: str | None = None,
) -> CacheEntry | None:
    """The entry to write for ``result``, or None when the request did not ask for one (no
    directive, an unknown entry class, or generations missing for one of its scopes).
    ``key``: another key than the request's own (the semantic cache's)."""
    directive = request.cache
    if directive is None:
        return None
    policy = classes.get(directive.entry_class)
    scopes = request_scopes(request, model_version)
    if policy is None or any(s not in directive.generations for s in scopes):
        return None
    return CacheEntry.new(
        key=key or request_key(request, model_version),
        tenant=request.tenant,
        model=request.model,
        result=result,
        scopes={s: directive.generations[s] for s in scopes},
        policy=policy,
        now=now,
    )
