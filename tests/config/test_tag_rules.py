"""Tag rules: upstream events to (tenant, tag)."""

from __future__ import annotations

import pytest

from headrace.config.tag_rules import RuleMismatch, TagRule, lookup

EVENT = {"shop": "acme", "product": {"id": 123, "sku": "A/7"}, "lines": [{"doc": "d1"}]}


def test_dotted_paths_json_pointers_and_templates() -> None:
    rule = TagRule(
        topic="catalog.changes",
        tag="product:{pid}",
        tenant="{shop}",
        fields={"pid": "product.id", "shop": "/shop"},
    )
    assert rule.apply(EVENT) == ("acme", "product:123")
    assert lookup(EVENT, "lines.0.doc") == "d1"
    assert lookup(EVENT, "/product/sku") == "A/7"
    assert lookup({"a/b": {"~": 1}}, "/a~1b/~0") == 1


def test_a_literal_tenant_and_missing_fields() -> None:
    rule = TagRule(topic="t", tag="doc:{d}", tenant="acme", fields={"d": "doc_id"})
    assert rule.apply({"doc_id": "x"}) == ("acme", "doc:x")
    with pytest.raises(RuleMismatch):
        rule.apply({"other": 1})
    with pytest.raises(RuleMismatch):
        rule.apply({"doc_id": {"nested": 1}})
    with pytest.raises(RuleMismatch):
        rule.apply({"doc_id": "has space"})


def test_templates_fill_names_only() -> None:
    with pytest.raises(ValueError):
        TagRule(topic="t", tag="x:{missing}", tenant="acme")
    rule = TagRule(topic="t", tag="x:{a.__class__}", tenant="acme", fields={})
    assert rule.apply({}) == ("acme", "x:{a.__class__}")  # not a placeholder: left as text
