"""The OpenAI Batch file formats, as documented for the Batch API: one JSON object per line.

Input line: ``{"custom_id", "method": "POST", "url": "/v1/embeddings", "body": {...}}``.
Output and error lines: ``{"id", "custom_id", "response": {"status_code", "request_id",
"body"} | null, "error": {"code", "message"} | null}``. The key order here is the documented
order, and these models write it so.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

EMBEDDINGS_URL = "/v1/embeddings"
# accepted once generation exists (issue: text generation); refused with a clear reason now
GENERATION_URLS = ("/v1/chat/completions", "/v1/completions")

CustomId = Annotated[str, StringConstraints(min_length=1, max_length=512)]


class EmbeddingsBody(BaseModel):
    """A field OpenAI's embeddings body does not have is refused, and so is ``dimensions``
    (served online at the model's own size only): nothing is dropped in silence."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    input: str | list[str]
    encoding_format: Literal["float"] = "float"
    user: str | None = None
    dimensions: None = None


class InputLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    custom_id: CustomId
    method: Literal["POST"]
    url: str
    body: dict[str, Any]


class ResponseBody(BaseModel):
    status_code: int
    request_id: str
    body: dict[str, Any]


class LineError(BaseModel):
    code: str
    message: str


class OutputLine(BaseModel):
    id: str
    custom_id: str | None
    response: ResponseBody | None
    error: LineError | None
