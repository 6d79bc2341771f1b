"""The interface between the batch path and a model."""

from __future__ import annotations

import resource
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt
import torch

FinishReason = Literal["stop", "length", "abort"]  # abort: cancelled while running
# a batch's vectors, [rows, dim]: one float32 array (a model's), or lists of floats
Vectors = npt.NDArray[np.float32] | list[list[float]]


def place_on_device(model: Any, device: torch.device) -> tuple[Any, int]:
    """The model in eval mode on ``device`` (fp16 on CUDA, fp32 on CPU), its attention
    kernels chosen (``choose_attention_kernels``), and on CUDA the bytes its weights take
    there (the peak counter starts over, for warm-up to measure)."""
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    model = model.to(device, dtype=dtype).eval()
    choose_attention_kernels(device)
    if device.type != "cuda":
        return model, 0
    torch.cuda.reset_peak_memory_stats(device)
    return model, torch.cuda.memory_allocated(device)


def choose_attention_kernels(device: torch.device) -> None:
    """On CUDA, scaled dot-product attention never through cuDNN: it builds a plan for every
    new shape (19 ms a call on an H200 for the test LM, one per decode step; turning it off
    made continuous generation 5x faster), so SDPA picks flash or memory-efficient attention.
    The switch is the process's, so every backend on CUDA sets it: an embedding batch's
    shape (rows x bucket) changes from batch to batch too."""
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


@dataclass(frozen=True)
class Shape:
    """One warm-up batch: ``rows`` inputs of ``length`` tokens, standing for ``bucket``."""

    bucket: int
    length: int
    rows: int

    @property
    def tokens(self) -> int:
        return self.rows * self.length


def default_shapes(buckets: Sequence[int], rows: int = 4) -> list[Shape]:
    """One batch per bucket at the bucket's bound (when no traffic has been seen)."""
    return [Shape(b, b, rows) for b in buckets]


def _rss_peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def warm_each(
    device: torch.device, shapes: Sequence[Shape], run: Callable[[Shape], None]
) -> tuple[str, dict[int, int]]:
    """Run every warm-up shape and measure, per bucket, the peak memory while its shapes ran:
    on CUDA the allocator's peak (reset before each shape); on CPU the process's peak
    resident set so far (it only grows). Returns (what was measured, peak per bucket)."""
    cuda = device.type == "cuda"
    peaks: dict[int, int] = {}
    for shape in sorted(shapes, key=lambda s: (s.bucket, s.tokens)):
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        run(shape)
        if cuda:
            torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) if cuda else _rss_peak_bytes()
        peaks[shape.bucket] = max(peaks.get(shape.bucket, 0), peak)
    return ("cuda_peak_allocated" if cuda else "cpu_peak_rss"), peaks


def cuda_memory(
    device: torch.device, weights_bytes: int, peak_tokens: int, peak: int | None = None
) -> dict[str, int]:
    """After warm-up on CUDA: what the memory planner prefers to its estimates. The peak
    over the weights, per token of the largest warm-up batch, is the activation cost."""
    torch.cuda.synchronize(device)
    if peak is None:
        peak = torch.cuda.max_memory_allocated(device)
    return {
        "allocated_bytes": torch.cuda.memory_allocated(device),
        "reserved_bytes": torch.cuda.memory_reserved(device),
        "weights_bytes": weights_bytes,
        "peak_bytes_per_token": max(0, peak - weights_bytes) // max(1, peak_tokens),
    }


@dataclass
class LoadTimings:
    load_weights_s: float = 0.0
    build_s: float = 0.0
    warm_up_s: float = 0.0
    memory: dict[str, int] = field(default_factory=dict)
    # measured during warm-up (``warm_each``): which peak, and its bytes per bucket
    memory_kind: str = ""
    peak_bytes_per_bucket: dict[int, int] = field(default_factory=dict)


@dataclass
class EncodedItem:
    """One input after tokenisation: its token count, or why it cannot be computed."""

    ids: list[int]
    token_count: int
    truncated: bool = False
    too_long: bool = False
    # its request's class (``schemas.messages.priority_rank``, 0 first): the continuous
    # decoder takes better-ranked rows first and lets them preempt worse-ranked ones
    rank: int = 1
    type_ids: list[int] | None = None  # a pair's segments (BERT's token_type_ids)


class Grammar(Protocol):
    """A row's structured output (``schemas.ResponseFormat``): ``json_object`` or
    ``json_schema`` (the schema as JSON text), and the llguidance grammar enforcing it."""

    @property
    def type(self) -> str: ...

    @property
    def json_schema(self) -> str | None: ...

    def grammar(self) -> str: ...


class Sampling(Protocol):
    """What a generation backend reads of a row's parameters: ``schemas.GenerateParams`` on
    the batch path, ``FixedSampling`` where there is no pydantic (scripts/gpu_check.py)."""

    @property
    def max_tokens(self) -> int: ...

    @property
    def temperature(self) -> float: ...

    @property
    def top_p(self) -> float: ...

    @property
    def stop(self) -> Sequence[str]: ...

    @property
    def seed(self) -> int | None: ...

    @property
    def presence_penalty(self) -> float: ...

    @property
    def frequency_penalty(self) -> float: ...

    @property
    def logit_bias(self) -> Sequence[tuple[int, float]]: ...

    @property
    def response_format(self) -> Grammar | None:
        """Structured output: None, or what the row's text must be (its ``grammar()``)."""
        ...

    @property
    def logprobs(self) -> int | None:
        """Each token's log probability with this many alternatives (None: none)."""
        ...


@dataclass(frozen=True)
class FixedSampling:
    """Sampling parameters without validation (warm-up, the GPU check); temperature 0 is
    greedy."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    response_format: Grammar | None = None
    logprobs: int | None = None


@dataclass(frozen=True)
class Logprob:
    """A generated token's log probability under the model (before any bias, penalty or
    grammar), and its ``top`` most likely alternatives, most likely first: (token id,
    log probability) pairs."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass
class Generated:
    text: str
    token_ids: list[int]
    finish_reason: FinishReason
    prompt_tokens: int
    # the row's share of the forward passes it was in (each pass split evenly among the rows
    # it decoded: a batch's rows are padded to one length); None: not measured
    device_ms: float | None = field(default=None, compare=False)
    logprobs: list[Logprob] | None = None  # one per generated token, where asked for

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ids)


class ModelBackend(Protocol):
    """What every backend has: one model, loaded in three timed stages, and a tokenizer."""

    @property
    def name(self) -> str: ...

    @property
    def task(self) -> str:
        """``embed`` or ``generate``: which batch method it has."""
        ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def timings(self) -> LoadTimings: ...

    def load_weights(self) -> None: ...

    def build(self) -> None: ...

    def warm_up(self, shapes: Sequence[Shape]) -> None:
        """Run the warm-up batches (``default_shapes``, or lengths seen in traffic) and fill
        in ``timings.peak_bytes_per_bucket``."""
        ...

    def encode(self, texts: list[str], truncate: list[bool]) -> list[EncodedItem]: ...


class Backend(ModelBackend, Protocol):
    """An embedding backend."""

    @property
    def vocab_size(self) -> int: ...

    def encode_ids(self, rows: list[list[int]], truncate: list[bool]) -> list[EncodedItem]:
        """Inputs given as token ids, as given (the tokenizer's special tokens around)."""
        ...

    def embed(self, items: list[EncodedItem], normalize: list[bool]) -> tuple[Vectors, int, int]:
        """Embeddings ([rows, dim]), real tokens and padded tokens of the batch (no
        too_long items)."""
        ...


OnFinished = Callable[[list[tuple[int, Generated]]], None]  # rows that just finished


class GenerativeBackend(ModelBackend, Protocol):
    """A text generation backend; ``on_delta(row, text)`` gets text as it is decoded;
    ``cancelled()`` (asked now and then) names rows to stop: they end with ``abort``;
    ``on_finished(rows)`` gets rows as they finish, while others still decode (a backend
    that batches continuously calls it; the caller may answer them at once). Every call is on
    the caller's thread; the list returned still holds every row."""

    def generate(
        self,
        items: list[EncodedItem],
        params: Sequence[Sampling],
        on_delta: Callable[[int, str], None] | None = None,
        cancelled: Callable[[], set[int]] | None = None,
        on_finished: OnFinished | None = None,
    ) -> list[Generated]: ...
