"""Bulk input lines in, OpenAI-format output and error lines out.

Two input formats:
- ``openai``: the OpenAI Batch input line; ``url`` is the job's endpoint:
  ``/v1/embeddings`` (``body.input`` one string, or a list of exactly one: a line is one
  request here), ``/v1/completions`` (``body.prompt``) or ``/v1/chat/completions``
  (``body.messages``), with the sampling fields of the gateway's routes.
- ``plain``: one text per line, or ``{"id": ..., "text": ...}``; the custom_id of a bare
  text is ``line-<n>``.

Every output and error line carries ``id`` ``batch_req_<job>-<line>``: a resumed job reads
the line numbers already answered back from its own files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError

from headrace.jobs.openai_answers import generation_body
from headrace.jobs.openai_bodies import (
    CHAT_URL,
    COMPLETIONS_URL,
    ChatCompletionCreate,
    CompletionCreate,
    explain,
)
from headrace.schemas.errors import ErrorCode, ErrorInfo, InvalidRequestError
from headrace.schemas.messages import EmbeddingResult, GenerationResult
from headrace.schemas.openai_batch import (
    EMBEDDINGS_URL,
    GENERATION_URLS,
    EmbeddingsBody,
    InputLine,
    LineError,
    OutputLine,
    ResponseBody,
)
from headrace.schemas.params import GenerateParams
from headrace.schemas.results import Result

InputFormat = Literal["openai", "plain"]

# error code of a reply -> the HTTP status its output line carries
STATUS_OF: dict[ErrorCode, int] = {
    ErrorCode.invalid_json: 400,
    ErrorCode.invalid_schema: 400,
    ErrorCode.empty_input: 400,
    ErrorCode.input_too_long: 400,
    ErrorCode.request_too_large: 413,
    ErrorCode.unknown_model: 404,
    ErrorCode.deadline_exceeded: 408,
    ErrorCode.cancelled: 499,
    ErrorCode.unavailable: 503,
    ErrorCode.overloaded: 429,
    ErrorCode.rate_limited: 429,
    ErrorCode.quota_exceeded: 429,
    ErrorCode.redelivery_exhausted: 500,
    ErrorCode.model_error: 500,
    ErrorCode.internal: 500,
}


@dataclass(frozen=True)
class Work:
    """A valid input line: what to compute."""

    line: int  # 1-based
    custom_id: str
    text: str
    model: str | None  # None: the job's default
    generation: GenerateParams | None = None  # a completion or chat line


@dataclass(frozen=True)
class Invalid:
    line: int
    custom_id: str | None
    reason: str


def parse_line(
    raw: str, line: int, fmt: InputFormat, endpoint: str = EMBEDDINGS_URL
) -> Work | Invalid:
    """One input line (without its newline) -> Work, or Invalid with the reason. Every line
    of a job uses the job's endpoint, as in OpenAI's Batch API."""
    if fmt == "plain":
        return _parse_plain(raw, line)
    try:
        data = json.loads(raw)
    except ValueError as exc:
        return Invalid(line, None, f"not JSON: {exc}")
    try:
        item = InputLine.model_validate(data)
    except ValidationError as exc:
        custom_id = data.get("custom_id") if isinstance(data, dict) else None
        return Invalid(line, custom_id if isinstance(custom_id, str) else None, _first(exc))
    if item.url != endpoint:
        return Invalid(
            line, item.custom_id, f"url {item.url!r}: this batch's endpoint is {endpoint}"
        )
    if item.url in GENERATION_URLS:
        return _parse_generation(item, line)
    try:
        body = EmbeddingsBody.model_validate(item.body)
    except ValidationError as exc:
        return Invalid(line, item.custom_id, "body: " + _first(exc))
    text = body.input
    if isinstance(text, list):
        if len(text) != 1:
            return Invalid(line, item.custom_id, "body.input: one input per line in batch files")
        text = text[0]
    if not text.strip():
        return Invalid(line, item.custom_id, "body.input is empty")
    return Work(line, item.custom_id, text, body.model)


def _parse_generation(item: InputLine, line: int) -> Work | Invalid:
    kind = CompletionCreate if item.url == COMPLETIONS_URL else ChatCompletionCreate
    try:
        body = kind.model_validate(item.body)
        if body.n != 1:
            return Invalid(line, item.custom_id, "body.n: one choice per line (batch files, jobs)")
        prompt = body.prompt()
        params = GenerateParams(**body.params())
    except (ValidationError, InvalidRequestError) as exc:
        reason = _first(exc) if isinstance(exc, ValidationError) else str(exc)
        return Invalid(line, item.custom_id, "body: " + reason)
    if not prompt.strip():
        return Invalid(line, item.custom_id, "the prompt is empty")
    return Work(line, item.custom_id, prompt, body.model, params)


def _parse_plain(raw: str, line: int) -> Work | Invalid:
    if raw.lstrip().startswith("{"):
        try:
            data = json.loads(raw)
        except ValueError as exc:
            return Invalid(line, None, f"not JSON: {exc}")
        custom_id, text = data.get("id"), data.get("text")
        if not isinstance(custom_id, str | int) or not isinstance(text, str):
            return Invalid(line, None, 'a JSON line needs "id" (string) and "text" (string)')
        custom_id = str(custom_id)
    else:
        custom_id, text = f"line-{line}", raw
    if not text.strip():
        return Invalid(line, custom_id, "empty text")
    return Work(line, custom_id, text, None)


def _first(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "line"
    if err["type"] == "extra_forbidden":
        return f"unrecognized request argument supplied: {where}"
    top = str(err["loc"][0]) if err["loc"] else ""
    return f"{where}: {err['msg'].removeprefix('Value error, ')}{explain(top)}"


# --- output ----------------------------------------------------------------------------------
def line_id(job_id: str, line: int) -> str:
    return f"batch_req_{job_id}-{line}"


def line_of(output_id: str) -> int | None:
    """The input line number an output or error line answers (from its ``id``)."""
    _, _, tail = output_id.rpartition("-")
    return int(tail) if tail.isdigit() else None


def success_line(
    job_id: str,
    line: int,
    custom_id: str,
    request_id: str,
    model: str,
    result: Result,
    endpoint: str = EMBEDDINGS_URL,
) -> str:
    if isinstance(result, GenerationResult):
        body = generation_body(request_id, model, result, chat=endpoint == CHAT_URL)
        response = ResponseBody(status_code=200, request_id=request_id, body=body)
        return _dump(job_id, line, custom_id, response, None)
    if not isinstance(result, EmbeddingResult):  # files and jobs take no rerank or classify
        raise TypeError(f"a batch line's result is an embedding or a generation: {result!r}")
    body = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": result.vector()}],
        "model": model,
        "usage": {"prompt_tokens": result.token_count, "total_tokens": result.token_count},
    }
    return _dump(
        job_id,
        line,
        custom_id,
        ResponseBody(status_code=200, request_id=request_id, body=body),
        None,
    )


def failure_line(job_id: str, line: int, custom_id: str, request_id: str, error: ErrorInfo) -> str:
    """A request the pipeline answered with an error: the response carries it, as OpenAI's
    error file does for a failed request."""
    body = {
        "error": {
            "message": error.message,
            "type": "invalid_request_error" if STATUS_OF[error.code] < 500 else "server_error",
            "param": None,
            "code": error.code.value,
        }
    }
    response = ResponseBody(status_code=STATUS_OF[error.code], request_id=request_id, body=body)
    return _dump(job_id, line, custom_id, response, None)


def expired_line(job_id: str, line: int, custom_id: str) -> str:
    """A line not answered before the batch's completion window ran out (OpenAI's
    ``batch_expired``)."""
    message = "this request could not be executed before the completion window expired"
    return _dump(job_id, line, custom_id, None, LineError(code="batch_expired", message=message))


def tokens_of(result: Result) -> tuple[int, int]:
    """(input, output) tokens of a result, for a batch's ``usage`` (a score: its pair's)."""
    if isinstance(result, GenerationResult):
        return result.usage.prompt_tokens, result.usage.completion_tokens
    return result.token_count, 0


def invalid_line(job_id: str, invalid: Invalid) -> str:
    """An input line that never became a request."""
    error = LineError(code="invalid_line", message=f"line {invalid.line}: {invalid.reason}")
    return _dump(job_id, invalid.line, invalid.custom_id, None, error)


def _dump(
    job_id: str,
    line: int,
    custom_id: str | None,
    response: ResponseBody | None,
    error: LineError | None,
) -> str:
    out = OutputLine(id=line_id(job_id, line), custom_id=custom_id, response=response, error=error)
    return out.model_dump_json()
