"""Declarative mapping from events on upstream topics to cache tags, e.g. topic
``catalog.changes``, field ``product_id`` → tag ``product:{product_id}`` of tenant ``{shop}``.

A field is a dotted path (``item.id``, list indexes as numbers) or a JSON pointer
(``/item/id``). Templates fill ``{name}`` from the fields and nothing else (no attribute or
format-spec access)."""

from __future__ import annotations

import re
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class RuleMismatch(ValueError):
    """An event lacks a field its rule needs (it is counted and skipped)."""


class TagRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str = Field(min_length=1)
    tag: str = Field(min_length=1)  # template, e.g. "product:{product_id}"
    tenant: str = Field(min_length=1)  # template or a literal tenant, e.g. "{shop}" or "acme"
    fields: dict[str, str] = Field(default_factory=dict)  # name -> dotted path or JSON pointer

    @model_validator(mode="after")
    def _placeholders_have_fields(self) -> Self:
        for template in (self.tag, self.tenant):
            for name in _PLACEHOLDER.findall(template):
                if name not in self.fields:
                    raise ValueError(f"{template!r} uses {{{name}}}, which is not in fields")
        return self

    def apply(self, event: Any) -> tuple[str, str]:
        """(tenant, tag) this event invalidates; RuleMismatch if a field is missing."""
        values = {name: _scalar(lookup(event, path), path) for name, path in self.fields.items()}
        return fill(self.tenant, values), fill(self.tag, values)


def fill(template: str, values: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def lookup(doc: Any, path: str) -> Any:
    """The value at a dotted path or JSON pointer (RFC 6901) in ``doc``."""
    if path.startswith("/"):
        parts = [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]
    else:
        parts = path.split(".")
    node = doc
    for part in parts:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise RuleMismatch(f"no {path!r} in the event")
    return node


def _scalar(value: Any, path: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise RuleMismatch(f"{path!r} is not a string or number")
    text = str(value)
    if not text or any(c.isspace() for c in text):
        raise RuleMismatch(f"{path!r} is empty or holds whitespace")
    return text
