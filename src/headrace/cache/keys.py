"""Cache keys and invalidation scopes. A key hashes everything that changes a result, the
tenant first: two tenants never share an entry."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Sequence

from pydantic import BaseModel

_SPACE = re.compile(r"\s+")


def normalise_input(text: str) -> str:
    """Unicode NFC, runs of whitespace as one space, no leading or trailing space. The
    embedding model's tokenizer splits on whitespace, so these never change its result."""
    return _SPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def cache_key(
    tenant: str,
    model: str,
    model_version: str,
    task: str,
    text: str,
    params: BaseModel,
    input_ids: Sequence[int] | None = None,
    input_pair: str | None = None,
) -> str:
    """An embedding's input is normalised (``normalise_input``); a prompt is the model's
    input as it is, spaces and all. Whether a generation is streamed does not change it.
    An input given as token ids is keyed by them (a text's keys are as they were)."""
    doc: dict[str, object] = {
        "tenant": tenant,
        "model": model,
        "model_version": model_version,
        "task": task,
        "input": text if task == "generate" else normalise_input(text),
        "params": params.model_dump(
            mode="json", exclude={"stream"} if task == "generate" else None
        ),
    }
    if input_ids is not None:
        doc["input_ids"] = list(input_ids)
    if input_pair is not None:  # a rerank's document, a classifier's second text
        doc["input_pair"] = normalise_input(input_pair)
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def tenant_scope(tenant: str) -> str:
    return f"tenant/{tenant}"


def model_scope(model: str, model_version: str) -> str:
    return f"model/{model}@{model_version}"


def tag_scope(tenant: str, tag: str) -> str:
    return f"tenant/{tenant}/tag/{tag}"


def entry_scopes(tenant: str, model: str, model_version: str, tags: list[str]) -> list[str]:
    """Every scope whose invalidation removes an entry: its tenant, its model version and
    each of its tags (tags are the tenant's own)."""
    return [
        tenant_scope(tenant),
        model_scope(model, model_version),
        *(tag_scope(tenant, t) for t in sorted(set(tags))),
    ]
