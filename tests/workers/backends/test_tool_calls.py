"""Tool calls in both decode modes, on the random-weight test LM (only the grammar can make
its text a call): with ``required`` every output is one or more whole calls of a declared
tool whose arguments validate against that tool's ``parameters``; without parallel calls,
exactly one; with ``auto``, each output is either such calls or a text that does not open
a call."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from headrace.schemas.params import GenerateParams
from headrace.schemas.response_format import ResponseFormat
from headrace.schemas.tool_calls import OPEN, ToolChoice, call_schema, read_calls
from headrace.workers.backends.generation import GenerationBackend
from tests.tool_schemas import FLOW, GATE, NO_ARGUMENTS

TOOLS: dict[str, dict[str, Any] | None] = {
    "get_flow": FLOW,
    "open_sluice": GATE,
    "stop_wheel": None,  # no parameters
}
SEEDS = 10
PROMPT = "tools: get_flow, open_sluice, stop_wheel\nuser: is the race full?\nassistant:"


def tool_format(choice: ToolChoice, parallel: bool) -> ResponseFormat:
    return ResponseFormat(
        type="tool_calls",
        json_schema=call_schema(list(TOOLS.items())),
        tool_choice=choice,
        parallel_tool_calls=parallel,
    )


def check_call(name: str, arguments: dict[str, Any]) -> None:
    assert name in TOOLS
    jsonschema.validate(arguments, TOOLS[name] or NO_ARGUMENTS)


@pytest.mark.parametrize("mode", ["static", "continuous"])
def test_required_calls_are_whole_and_valid_and_auto_is_calls_or_text(
    decoders: dict[str, GenerationBackend], mode: str
) -> None:
    backend = decoders[mode]
    asks = [(c, p) for c, p in (("required", True), ("required", False), ("auto", True))]
    rows = [(choice, parallel, seed) for choice, parallel in asks for seed in range(SEEDS)]
    params = [
        GenerateParams(
            max_tokens=200,
            temperature=1.0,
            seed=seed,
            response_format=tool_format(choice, parallel),  # type: ignore[arg-type]
        )
        for choice, parallel, seed in rows
    ]
    opening = str(backend.tokenizer.convert_tokens_to_ids("<"))
    for seed in range(SEEDS):  # auto, with "<" made likely: the model opens calls
        rows.append(("auto", False, seed))
        biased = {"seed": seed, "logit_bias": {opening: 8.0}}
        one_call = {"response_format": tool_format("auto", False)}
        params.append(GenerateParams.model_validate(params[-1].model_dump() | biased | one_call))
    out = backend.generate(backend.encode([PROMPT] * len(rows), [False] * len(rows)), params)
    chose_text = 0
    for (choice, parallel, seed), generated in zip(rows, out, strict=True):
        where = (choice, parallel, seed, generated.text)
        calls = read_calls(generated.text)
        if choice == "auto" and not generated.text.startswith("<"):
            chose_text += 1
            assert calls is None, where
            continue
        if generated.finish_reason == "length":  # parallel calls may go on past max_tokens
            assert parallel and generated.text.startswith(OPEN), where
            continue
        assert generated.finish_reason == "stop", where
        assert calls is not None, where
        assert parallel or len(calls) == 1, where
        for call in calls:
            check_call(call.name, call.arguments)
    called = [read_calls(o.text) for o in out[: 2 * SEEDS]]
    assert sum(c is not None for c in called) >= SEEDS  # most required rows end whole
    assert chose_text >= SEEDS // 2  # unbiased, auto answers text: "<" is one token of many
    assert any(read_calls(o.text) for o in out[3 * SEEDS :])  # biased, auto calls tools
    print(json.dumps({"text answers under auto": chose_text, "first": out[0].text}))


def test_a_text_that_is_not_whole_calls_is_not_read_as_calls() -> None:
    call = '<tool_call>{"name": "stop_wheel", "arguments": {}}</tool_call>'
    assert read_calls(call * 2) is not None and len(read_calls(call * 2) or []) == 2
    for text in (
        "",
        "the race is full",
        call[:-3],
        call + " and more",
        "<tool_call>[1]</tool_call>",
    ):
        assert read_calls(text) is None, text
