"""The functions the tool-call tests declare, and what their arguments must be: one with
bounded arguments, one with a short string, one with none."""

from __future__ import annotations

from typing import Any

FLOW: dict[str, Any] = {  # get_flow's parameters
    "type": "object",
    "properties": {
        "race": {"enum": ["head", "tail"]},
        "hours": {"type": "integer", "minimum": 1, "maximum": 48},
    },
    "required": ["race", "hours"],
    "additionalProperties": False,
}
GATE: dict[str, Any] = {  # open_sluice's parameters
    "type": "object",
    "properties": {"gate": {"type": "string", "maxLength": 8}},
    "required": ["gate"],
    "additionalProperties": False,
}
NO_ARGUMENTS: dict[str, Any] = {"type": "object", "maxProperties": 0}  # a function without
