"""Messages on the wire (Kafka, Celery, Redis). Every one carries ``schema_version``.

Request and Reply are the public contract (JSON Schema exported by ``headrace schema export``);
Batch and Completion are the internal contract between dispatcher and worker.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from headrace.schemas.errors import ErrorCode, ErrorInfo
from headrace.schemas.params import EmbedParams, GenerateParams, Priority, ScoreParams
from headrace.schemas.results import EmbeddingResult as EmbeddingResult
from headrace.schemas.results import GenerationResult as GenerationResult
from headrace.schemas.results import Result
from headrace.schemas.results import ScoreResult as ScoreResult
from headrace.schemas.results import Usage as Usage
from headrace.schemas.tenants import TenantName

SCHEMA_VERSION: Literal[1] = 1
# embed: a vector; generate: text; rerank: a (query, document) pair's relevance; classify: a
# text's (or pair's) label probabilities
Task = Literal["embed", "generate", "rerank", "classify"]
SCORED = ("rerank", "classify")
PARAMS: dict[str, type[EmbedParams | GenerateParams | ScoreParams]] = {
    "embed": EmbedParams,
    "generate": GenerateParams,
    "rerank": ScoreParams,
    "classify": ScoreParams,
}
MAX_INPUT_CHARS = 1_000_000  # a hard byte-ish ceiling; the token limit is the model's
MAX_INPUT_IDS = 131_072  # the same for an input given as token ids

Identifier = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:/@+=-]+$")
]


Tag = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^\S+$")]
CacheTier = Literal["l1", "l2", "l3"]


def utc_now() -> datetime:
    return datetime.now(UTC)


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class CacheDirective(_Message):
    """Carried by a request whose client reads the cache: the worker writes its result
    through, under ``entry_class``'s expiry, tagged with ``tags`` (scoped to the request's
    tenant), unless one of its scopes was invalidated since ``generations`` was read when the
    request was submitted."""

    entry_class: Identifier = "default"
    tags: list[Tag] = Field(default_factory=list, max_length=64)
    generations: dict[str, int] = Field(default_factory=dict)


class Request(_Message):
    schema_version: Literal[1] = SCHEMA_VERSION
    request_id: Identifier
    tenant: TenantName
    model: Identifier
    task: Task = "embed"
    input: Annotated[str, Field(max_length=MAX_INPUT_CHARS)]
    input_pair: Annotated[
        str | None,
        Field(
            max_length=MAX_INPUT_CHARS,
            description=(
                "A rerank or classify request's second text: the document a query (input) "
                "is scored against, or a classifier's pair (e.g. premise and hypothesis)."
            ),
        ),
    ] = None
    input_ids: Annotated[
        list[Annotated[int, Field(ge=0)]] | None,
        Field(
            min_length=1,
            max_length=MAX_INPUT_IDS,
            description=(
                "An embed request's input as token ids of the model's tokenizer, embedded as "
                "given (not decoded): its special tokens go around them as around a text's. "
                "With input_ids, input is empty."
            ),
        ),
    ] = None
    params: EmbedParams | GenerateParams | ScoreParams = EmbedParams()
    reply_to: Annotated[
        str,
        StringConstraints(min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$"),
        Field(
            description=(
                "The topic the reply goes to: one of the pipeline's reply topics, "
                "<prefix>.replies.<name>. A request naming any other topic is dead-lettered "
                "and never answered there."
            )
        ),
    ]
    deadline: AwareDatetime | None = None
    created_at: AwareDatetime = Field(default_factory=utc_now)
    token_count: Annotated[
        int | None,
        Field(
            ge=0,
            description=(
                "A hint: the tokens the producer counted with the model's tokenizer, special "
                "tokens included. The dispatcher counts again and trusts its own count: a "
                "request longer than its topic's bucket is forwarded to its proper bucket, "
                "and the batch budget uses the real count. Producers that cannot tokenize "
                "leave it out and produce to the unbucketed topic <prefix>.requests."
            ),
        ),
    ] = None
    cache: CacheDirective | None = None  # set by clients that read the result cache
    # generation only: the conversation this turn belongs to (its history is the prompt's
    # start; the turn and its answer are appended to it)
    session_id: Identifier | None = None
    routing_key: Annotated[
        Identifier | None,
        Field(
            description=(
                "Under a traffic split sticky by key, requests with the same routing key "
                "(within a tenant) are served by the same model version."
            )
        ),
    ] = None
    vector_encoding: Annotated[
        Literal["float", "base64"],
        Field(
            description=(
                "How an embedding comes back: JSON numbers (EmbeddingResult.embedding), or "
                "little-endian float32 bytes in base64 (EmbeddingResult.embedding_base64), "
                "smaller and cheaper to make and to read."
            )
        ),
    ] = "float"
    priority: Annotated[
        Priority,
        Field(
            description=(
                "The request's class. 'interactive' and 'default' ride the online lane; "
                "'batch' the bulk lane (it waits for online traffic and always moves); "
                "'sheddable' the online lane, but it is the first refused under overload "
                "(overloaded at half its bucket's backlog bound)."
            )
        ),
    ] = "default"
    signature: Annotated[
        str | None,
        Field(
            max_length=128,
            description=(
                "For a tenant with a key: hex HMAC-SHA256 with it over 'v1\\nrequest/2\\n' "
                "and the record as JSON without this field, as the schema's fields dump in "
                "order (schemas/signing.py). A dispatcher holding the tenant's key "
                "dead-letters a request without a valid one, and a signed one older than "
                "answered_ttl_s (a replay)."
            ),
        ),
    ] = None

    @property
    def key(self) -> tuple[str, str]:
        """(tenant, request_id): a request id is unique within its tenant."""
        return (self.tenant, self.request_id)

    def signable(self) -> str:
        """The record as JSON without its signature: what a signature covers."""
        return self.model_dump_json(exclude={"signature"})

    @field_validator("params", mode="before")
    @classmethod
    def _params_of_task(cls, value: Any, info: ValidationInfo) -> Any:
        """``params`` are read as the task's own kind (both accept ``{}``). A field
        validator, not the model's: the rest of the record is parsed from JSON in Rust
        (``task`` comes before ``params``, so it is read already)."""
        if isinstance(value, dict):
            kind = PARAMS.get(str(info.data.get("task", "embed")), EmbedParams)
            return kind.model_validate(value)
        return value

    @model_validator(mode="after")
    def _params_match_task(self) -> Self:
        wanted = PARAMS[self.task]
        if not isinstance(self.params, wanted):
            if self.params == type(self.params)():  # left at the default: the task's default
                self.params = wanted()
            else:
                raise ValueError(f"a {self.task} request takes {wanted.__name__}")
        if self.session_id is not None and self.task != "generate":
            raise ValueError("session_id is for generate requests")
        if self.input_ids is not None and (self.task != "embed" or self.input):
            raise ValueError("input_ids are an embed request's input, with input empty")
        if self.input_pair is not None and self.task not in SCORED:
            raise ValueError("input_pair is a rerank or classify request's second text")
        if self.task == "rerank" and self.input_pair is None:
            raise ValueError("a rerank request scores input (the query) against input_pair")
        return self


class Timings(_Message):
    """Where a request's time went, in milliseconds.

    queued_ms: created_at -> the dispatcher read it; batch_wait_ms: read -> its batch started
    computing (batch formation and the Celery queue); compute_ms: the batch's model time.
    to_worker_ms, the end of batch_wait_ms: its batch made by the dispatcher -> started
    computing (the trip by Celery or the hand-off, and the worker's claim and admission;
    None from a worker that does not say).
    """

    queued_ms: float
    batch_wait_ms: float
    compute_ms: float
    to_worker_ms: float | None = None


class BatchInfo(_Message):
    batch_id: str
    bucket: int
    size: int
    real_tokens: int
    padded_tokens: int


class Cost(_Message):
    """What computing a request cost: ``device_ms`` is its share of the forward passes it
    was in, each pass split evenly among the rows it decoded (a batch's rows are padded to
    one length, so this is the split by padded tokens). Continuous generation charges a row
    only for the passes of the shared loop it was in, so the charges of overlapping batches
    add up to the loop's time; a backend that does not measure passes (embeddings, vLLM)
    charges an even share of its batch's compute time."""

    tokens: int  # real tokens of this request (prompt and generated)
    padded_tokens: int  # its row's tokens with padding
    device_ms: float


class StreamDelta(_Message):
    """A piece of a generation's text, sent before its final Reply on the same reply topic
    (same key, so in order). ``seq`` counts from 0; a redelivered batch sends the same
    pieces again (sampling is seeded from the request id unless a seed is given), so readers
    drop a ``seq`` they have seen."""

    schema_version: Literal[1] = SCHEMA_VERSION
    type: Literal["delta"] = "delta"
    request_id: str
    tenant: str
    model: str
    seq: Annotated[int, Field(ge=0)]
    text: str


class Degraded(_Message):
    """A reply served by a rung of the degradation ladder instead of the stable version's
    own computation: ``fallback_version`` (computed by the model's previous stable version),
    ``cache`` (a cached result; ``stale``: past its expiry or invalidated since), ``canned``
    (the model's configured canned answer). ``reason``: what put the request on the ladder."""

    rung: Literal["fallback_version", "cache", "canned"]
    reason: Literal["no_workers", "failing", "late"]
    stale: bool = False


class Reply(_Message):
    schema_version: Literal[1] = SCHEMA_VERSION
    request_id: str
    tenant: str
    model: str
    result: Result | None = None
    error: ErrorInfo | None = None
    timings: Timings | None = None
    batch: BatchInfo | None = None
    cost: Cost | None = None  # set when this reply was computed (not for errors or cache hits)
    cache_tier: CacheTier | None = None  # served from the result cache, by this tier
    # a semantic cache hit: the answer to another prompt this similar (cosine) to this one;
    # set by the client itself, never on the wire (a reader of an older version forbids it)
    semantic_similarity: float | None = Field(default=None, exclude=True)
    model_version: str | None = None  # the version that computed the result (or cached it)
    degraded: Degraded | None = None  # served by a rung of the degradation ladder
    replied_at: AwareDatetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _result_xor_error(self) -> Self:
        if (self.result is None) == (self.error is None):
            raise ValueError("a reply carries exactly one of result and error")
        return self

    @classmethod
    def failure(
        cls, request_id: str, tenant: str, model: str, code: ErrorCode, message: str
    ) -> Reply:
        return cls(
            request_id=request_id,
            tenant=tenant,
            model=model,
            error=ErrorInfo(code=code, message=message),
        )


class RecordRef(_Message):
    """Where a request sits in Kafka."""

    topic: str
    partition: int
    offset: int


class BatchItem(_Message):
    request: Request
    ref: RecordRef
    arrived_at: float  # unix seconds when the dispatcher read the record
    # the W3C trace context its record carried (the ``traceparent`` Kafka header)
    traceparent: str | None = None
    # a shadow version computes this request too: keep this result to compare with its own
    compare_with: str | None = None
    # sent to the model's fallback version (its stable version had no live worker): the
    # reply says so
    degraded: Degraded | None = None


class Batch(_Message):
    schema_version: Literal[1] = SCHEMA_VERSION
    batch_id: str
    bucket: int
    dispatcher_id: str
    attempt: int = 1
    dispatched_at: float
    items: list[BatchItem]
    lane: Literal["online", "bulk"] = "online"  # bulk: computed at a lower CPU priority
    model_version: str | None = None  # the version whose queue it was sent to
    # a shadow copy: computed and compared, never answered, claimed, or cached
    shadow: bool = False
    # the dispatcher's: request records as it read them, by (topic, partition, offset);
    # ``batch_body`` puts these bytes in for the requests instead of serialising them again
    _records_read: dict[tuple[str, int, int], bytes] = PrivateAttr(default_factory=dict)

    def keep_records_read(self, read: dict[tuple[str, int, int], bytes]) -> Batch:
        """Carry each request as its record was read (``read``: by where it sits), for
        ``schemas.wire.batch_body``. Only a record the request was parsed from, unchanged,
        and that gave every field whose default is made anew (``created_at``): the worker
        parses it into the same request."""
        self._records_read = read
        return self

    @property
    def records_read(self) -> dict[tuple[str, int, int], bytes]:
        return self._records_read


class Completion(_Message):
    """Worker -> dispatcher: these records have their reply produced (done), or are being
    answered by another attempt right now (deferred: the dispatcher sends them again after
    a short backoff, by when that attempt has usually answered them)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    batch_id: str
    done: list[RecordRef]
    deferred: list[RecordRef] = []
    failed: int = 0  # of ``done``, how many got a model_error (feeds the error-rate breaker)
    # what computing cost (the autoscaling signal learns a request's cost from these)
    computed: int = 0  # rows the model ran
    padded_tokens: int = 0
    compute_ms: float = 0.0


def final_reply(value: bytes) -> Reply | None:
    """A reply topic's record as a final Reply; None for a StreamDelta or anything that is
    not a reply (what a reader counting answers skips)."""
    try:
        parsed = parse_reply_record(value)
    except ValidationError:
        return None
    return parsed if isinstance(parsed, Reply) else None


def parse_reply_record(value: bytes) -> Reply | StreamDelta:
    """A record of a reply topic: a final Reply, or a StreamDelta (``"type": "delta"``).
    Raises pydantic's ValidationError for anything else."""
    if b'"type":"delta"' in value or b'"type": "delta"' in value:
        return StreamDelta.model_validate_json(value)
    return Reply.model_validate_json(value)
