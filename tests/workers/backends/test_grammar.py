"""Structured output in both decode modes, proved on the random-weight test LM (a model
that writes gibberish, so nothing but the mask can make its text valid): for a set of
schemas (an object, enums, arrays, nesting, numbers with bounds) every output, sampled at
temperature 1 with many seeds, parses and validates with ``jsonschema``; rows without a
format in the same batch are untouched; and the unpacking of llguidance's bitmask."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import torch

from headrace.schemas.params import GenerateParams
from headrace.schemas.response_format import ResponseFormat
from headrace.workers.backends.generation import GenerationBackend
from headrace.workers.backends.grammar import unpack

SCHEMAS: dict[str, dict[str, Any]] = {
    "object": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "ok": {"type": "boolean"},
        },
        "required": ["name", "ok"],
        "additionalProperties": False,
    },
    "enum": {"enum": ["weir", "headrace", "wheel", "tailrace"]},
    "array": {
        "type": "array",
        "items": {"type": "integer", "minimum": -5, "maximum": 5},
        "minItems": 1,
        "maxItems": 4,
    },
    "nested": {
        "type": "object",
        "properties": {
            "mill": {
                "type": "object",
                "properties": {
                    "stones": {"type": "integer", "minimum": 1, "maximum": 4},
                    "parts": {
                        "type": "array",
                        "items": {"enum": ["shaft", "paddle", "sluice"]},
                        "maxItems": 3,
                    },
                },
                "required": ["stones", "parts"],
                "additionalProperties": False,
            }
        },
        "required": ["mill"],
        "additionalProperties": False,
    },
    "bounded numbers": {
        "type": "object",
        "properties": {
            "fall_m": {"type": "integer", "minimum": 0, "maximum": 30},
            "share": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["fall_m", "share"],
        "additionalProperties": False,
    },
}
SEEDS = 12


@pytest.mark.parametrize("mode", ["static", "continuous"])
def test_every_output_parses_and_validates_against_its_schema(
    decoders: dict[str, GenerationBackend], mode: str
) -> None:
    backend = decoders[mode]
    rows = [(name, seed) for name in SCHEMAS for seed in range(SEEDS)]
    params = [
        GenerateParams(
            max_tokens=160,
            temperature=1.0,
            seed=seed,
            response_format=ResponseFormat(type="json_schema", json_schema=SCHEMAS[name]),
        )
        for name, seed in rows
    ]
    free = GenerateParams(max_tokens=24, temperature=1.0, seed=7)  # a batch-mate asking none
    items = backend.encode(
        ["The mill answers in JSON:"] * (len(rows) + 1), [False] * (len(rows) + 1)
    )
    out = backend.generate(items, [*params, free])
    for (name, seed), generated in zip(rows, out, strict=False):
        assert generated.finish_reason == "stop", (name, seed, generated.text)
        jsonschema.validate(json.loads(generated.text), SCHEMAS[name])
    alone = backend.generate(backend.encode(["The mill answers in JSON:"], [False]), [free])
    assert out[-1].token_ids == alone[0].token_ids  # the unconstrained row is as it would be
    shown = {name: out[rows.index((name, 0))].text for name in SCHEMAS}
    print(json.dumps(shown, indent=1))


def test_json_object_gives_an_object_and_without_a_format_the_model_writes_no_json(
    decoders: dict[str, GenerationBackend],
) -> None:
    backend = decoders["static"]
    items = backend.encode(["The mill answers in JSON:"] * 2, [False] * 2)
    as_json = GenerateParams(
        max_tokens=200, temperature=0.8, seed=3, response_format=ResponseFormat(type="json_object")
    )
    plain = GenerateParams(max_tokens=40, temperature=0.8, seed=3)
    constrained, free = backend.generate(items, [as_json, plain])
    if constrained.finish_reason == "stop":
        assert isinstance(json.loads(constrained.text), dict)
    else:  # an open object may go on past max_tokens: it ends as JSON's beginning
        assert constrained.finish_reason == "length" and constrained.text.startswith("{")
    with pytest.raises(json.JSONDecodeError):
        json.loads(free.text)  # the mask, not the model, makes the JSON


def test_bitmask_unpacking_keeps_exactly_the_allowed_tokens() -> None:
    allowed = [0, 5, 31, 32, 63, 64, 99]
    words = torch.zeros((2, 4), dtype=torch.int32)
    for token in allowed:
        word, bit = divmod(token, 32)
        value = int(words[0, word]) | (1 << bit)
        words[0, word] = value - (1 << 32) if value >= 1 << 31 else value  # int32 wraps
    mask = unpack(words, 130)  # wider than the mask: the rest are not allowed
    assert torch.nonzero(mask[0]).flatten().tolist() == allowed
    assert not mask[1].any() and mask.shape == (2, 130)
