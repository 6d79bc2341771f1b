"""Cache keys: everything that changes a result changes the key; the tenant always does."""

from __future__ import annotations

from headrace.cache.keys import cache_key, entry_scopes, normalise_input
from headrace.schemas.messages import EmbedParams

BASE = ("acme", "all-MiniLM-L6-v2", "v1", "embed", "a red bicycle", EmbedParams())


def key(**changes: object) -> str:
    names = ["tenant", "model", "model_version", "task", "text", "params"]
    args = dict(zip(names, BASE, strict=True))
    args.update(changes)
    return cache_key(**args)  # type: ignore[arg-type]


def test_every_part_of_the_request_changes_the_key() -> None:
    base = key()
    assert len(base) == 64
    variants = [
        key(tenant="globex"),
        key(model="other-model"),
        key(model_version="v2"),
        key(task="generate"),
        key(text="a blue bicycle"),
        key(params=EmbedParams(normalize=False)),
        key(params=EmbedParams(truncate=True)),
    ]
    assert base not in variants
    assert len(set(variants)) == len(variants)


def test_whitespace_and_unicode_forms_do_not_change_the_key() -> None:
    assert key(text="  a   red\tbicycle\n") == key()
    assert normalise_input("cafe\u0301") == normalise_input("caf\u00e9")
    assert key(text="A red bicycle") != key()  # case is the model's business, not ours


def test_scopes_are_the_tenant_the_model_version_and_the_tenants_own_tags() -> None:
    scopes = entry_scopes("acme", "m", "v1", ["doc:2", "doc:1", "doc:1"])
    assert scopes == ["tenant/acme", "model/m@v1", "tenant/acme/tag/doc:1", "tenant/acme/tag/doc:2"]
    assert entry_scopes("globex", "m", "v1", ["doc:1"])[2] != scopes[2]
