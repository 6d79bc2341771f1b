"""Input line parsing and the OpenAI output line format, byte for byte."""

from __future__ import annotations

import json

from headrace.jobs.formats import (
    Invalid,
    Work,
    failure_line,
    invalid_line,
    line_of,
    parse_line,
    success_line,
)
from headrace.schemas.errors import ErrorCode, ErrorInfo
from headrace.schemas.messages import EmbeddingResult, GenerationResult, Usage
from headrace.schemas.params import GenerateParams
from headrace.schemas.tool_calls import write_call


def openai(custom_id: str, body: dict[str, object], url: str = "/v1/embeddings") -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def test_openai_lines_become_work_or_a_reason() -> None:
    ok = parse_line(openai("a", {"model": "all-MiniLM-L6-v2", "input": "hi"}), 1, "openai")
    assert ok == Work(1, "a", "hi", "all-MiniLM-L6-v2")
    one = parse_line(openai("b", {"model": "m", "input": ["only"]}), 2, "openai")
    assert isinstance(one, Work) and one.text == "only"
    cases = {
        "{not json": "not JSON",
        json.dumps({"custom_id": "c", "method": "GET", "url": "/v1/embeddings", "body": {}}): (
            "method"
        ),
        openai("d", {"model": "m", "input": ""}): "empty",
        openai("e", {"model": "m", "input": ["x", "y"]}): "one input per line",
        openai("f", {"input": "x"}): "body: model",
        openai("g", {"model": "m", "input": "x"}, url="/v1/chat/completions"): (
            "this batch's endpoint is /v1/embeddings"
        ),
        openai("h", {"model": "m", "input": "x"}, url="/v2/x"): "url '/v2/x'",
        json.dumps([1, 2]): "line",
    }
    for raw, reason in cases.items():
        parsed = parse_line(raw, 7, "openai")
        assert isinstance(parsed, Invalid), raw
        assert reason in parsed.reason, (raw, parsed.reason)
        assert parsed.line == 7
    wrong = parse_line(openai("e", {"model": "m", "input": ["x", "y"]}), 3, "openai")
    assert isinstance(wrong, Invalid) and wrong.custom_id == "e"  # known: kept for the error


def test_completion_and_chat_lines_on_their_own_endpoints() -> None:
    chat = "/v1/chat/completions"
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    body = {"model": "lm", "messages": messages, "max_tokens": 5, "temperature": 0}
    work = parse_line(openai("c1", body, url=chat), 1, "openai", chat)
    assert isinstance(work, Work) and work.model == "lm"
    assert work.text == "system: Be brief.\nuser: Hi\nassistant:"
    assert work.generation == GenerateParams(max_tokens=5, temperature=0)
    completion = "/v1/completions"
    done = parse_line(
        openai("p1", {"model": "lm", "prompt": "Once", "stop": "."}, url=completion),
        2,
        "openai",
        completion,
    )
    assert isinstance(done, Work) and done.text == "Once"
    assert done.generation is not None and done.generation.stop == (".",)
    assert done.generation.temperature == 1.0  # OpenAI's default
    bad = {
        openai("x", {"model": "lm", "messages": []}, url=chat): "messages",
        openai("y", {"model": "lm", "messages": [messages[0]]}, url=chat): "the user's",
        openai("z", {"model": "lm", "prompt": "hi"}, url=completion): "endpoint is",
        openai("w", {"model": "lm", "messages": messages, "max_tokens": 0}, url=chat): "max",
    }
    for raw, reason in bad.items():
        parsed = parse_line(raw, 3, "openai", chat)
        assert isinstance(parsed, Invalid) and reason in parsed.reason, (raw, parsed)


def test_generation_output_lines() -> None:
    result = GenerationResult(
        text="Hello", finish_reason="stop", usage=Usage(prompt_tokens=4, completion_tokens=2)
    )
    line = json.loads(
        success_line("batch_q", 3, "c3", "batch_q-3", "lm", result, "/v1/chat/completions")
    )
    assert list(line) == ["id", "custom_id", "response", "error"]
    body = line["response"]["body"]
    assert body["object"] == "chat.completion" and body["id"] == "chatcmpl-batch_q-3"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Hello"}
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    text = json.loads(
        success_line("batch_q", 4, "c4", "batch_q-4", "lm", result, "/v1/completions")
    )
    assert text["response"]["body"]["choices"][0]["text"] == "Hello"


def test_plain_lines() -> None:
    assert parse_line("just text", 4, "plain") == Work(4, "line-4", "just text", None)
    assert parse_line('{"id": "x1", "text": "t"}', 5, "plain") == Work(5, "x1", "t", None)
    assert parse_line('{"id": 7, "text": "t"}', 5, "plain") == Work(5, "7", "t", None)
    assert isinstance(parse_line("   ", 6, "plain"), Invalid)
    assert isinstance(parse_line('{"id": "x"}', 6, "plain"), Invalid)


def test_output_lines_match_the_documented_format() -> None:
    result = EmbeddingResult(embedding=[0.5, -0.25], token_count=3)
    line = success_line("batch_abc", 12, "req-12", "batch_abc-12", "all-MiniLM-L6-v2", result)
    assert line == (
        '{"id":"batch_req_batch_abc-12","custom_id":"req-12","response":{"status_code":200,'
        '"request_id":"batch_abc-12","body":{"object":"list","data":[{"object":"embedding",'
        '"index":0,"embedding":[0.5,-0.25]}],"model":"all-MiniLM-L6-v2","usage":'
        '{"prompt_tokens":3,"total_tokens":3}}},"error":null}'
    )
    assert line_of(json.loads(line)["id"]) == 12

    failed = failure_line(
        "batch_abc", 3, "c3", "batch_abc-3", ErrorInfo(code=ErrorCode.input_too_long, message="m")
    )
    assert failed == (
        '{"id":"batch_req_batch_abc-3","custom_id":"c3","response":{"status_code":400,'
        '"request_id":"batch_abc-3","body":{"error":{"message":"m","type":'
        '"invalid_request_error","param":null,"code":"input_too_long"}}},"error":null}'
    )
    bad = invalid_line("batch_abc", Invalid(9, None, "not JSON: x"))
    assert bad == (
        '{"id":"batch_req_batch_abc-9","custom_id":null,"response":null,"error":'
        '{"code":"invalid_line","message":"line 9: not JSON: x"}}'
    )
    assert line_of("no-number-here") is None


def test_a_batch_line_asking_for_what_is_not_served_is_invalid_naming_the_field() -> None:
    chat = "/v1/chat/completions"
    messages = [{"role": "user", "content": "Hi"}]
    cases = {
        openai("a", {"model": "lm", "messages": messages, "n": 2}, url=chat): "n: ",
        openai("b", {"model": "lm", "messages": messages, "tools": [{}]}, url=chat): "tools",
        openai("c", {"model": "lm", "messages": messages, "foo": 1}, url=chat): "foo",
    }
    for raw, field in cases.items():
        parsed = parse_line(raw, 1, "openai", chat)
        assert isinstance(parsed, Invalid) and field in parsed.reason, (raw, parsed)
    [n_line] = [raw for raw, field in cases.items() if field == "n: "]
    n_reason = parse_line(n_line, 1, "openai", chat)
    assert isinstance(n_reason, Invalid) and "one choice per line" in n_reason.reason
    embed = parse_line(openai("d", {"model": "m", "input": "x", "dimensions": 8}), 2, "openai")
    assert isinstance(embed, Invalid) and "dimensions" in embed.reason
    user = parse_line(openai("e", {"model": "m", "input": "x", "user": "u"}), 3, "openai")
    assert isinstance(user, Work)


def test_a_batch_line_asking_for_structured_output_carries_it_and_a_bad_schema_is_invalid() -> None:
    chat = "/v1/chat/completions"
    messages = [{"role": "user", "content": "Hi"}]
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    body = {"model": "lm", "messages": messages, "response_format": fmt}
    work = parse_line(openai("s1", body, url=chat), 1, "openai", chat)
    assert isinstance(work, Work) and work.generation is not None
    carried = work.generation.response_format
    assert carried is not None and json.loads(carried.json_schema or "") == schema
    fmt["json_schema"] = {"name": "answer", "schema": {"type": "frob"}}
    bad = parse_line(openai("s2", body, url=chat), 2, "openai", chat)
    assert isinstance(bad, Invalid) and "response_format" in bad.reason


def test_a_batch_line_with_tools_carries_their_grammar_and_answers_tool_calls() -> None:
    chat = "/v1/chat/completions"
    tool = {"type": "function", "function": {"name": "now"}}
    body = {
        "model": "lm",
        "messages": [{"role": "user", "content": "What time is it?"}],
        "tools": [tool],
        "tool_choice": "required",
    }
    work = parse_line(openai("t1", body, url=chat), 1, "openai", chat)
    assert isinstance(work, Work) and work.generation is not None
    fmt = work.generation.response_format
    assert fmt is not None and fmt.type == "tool_calls" and fmt.tool_choice == "required"
    assert work.text.startswith("tools: ")  # the functions are in the transcript
    called = GenerationResult(
        text=write_call("now", {}),
        finish_reason="tool_calls",
        usage=Usage(prompt_tokens=9, completion_tokens=12),
    )
    line = json.loads(success_line("batch_t", 1, "t1", "batch_t-1", "lm", called, chat))
    choice = line["response"]["body"]["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"] == {"name": "now", "arguments": "{}"}
    body["tool_choice"] = {"type": "function", "function": {"name": "later"}}
    bad = parse_line(openai("t2", body, url=chat), 2, "openai", chat)
    assert isinstance(bad, Invalid) and "tool_choice" in bad.reason
