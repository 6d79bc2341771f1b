"""Memory planning: what fits on a device, from a model's shape and the device's size.

A worker's memory is its weights, the attention keys and values kept for every token of every
sequence in flight (a causal LM's KV cache; an encoder keeps none), the activations of the
batch being computed, and overhead (CUDA context, allocator slack, buffers). The planner turns
those into the number of sequences that fit at once and a batch budget per length bucket.

Estimates come from the model's ``config.json`` and its safetensors headers (exact weight
bytes, nothing loaded). On CUDA the worker measures after warm-up and the measured figures win
(``Measured``): ``memory_allocated`` after loading is the weights, the peak during warm-up
over the largest warm-up batch gives activation bytes per padded token, and
``memory_reserved`` over ``memory_allocated`` is the allocator's slack.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from headrace.models.weights import tensors

GIB = 1024**3
DTYPE_BYTES = {
    "float64": 8,
    "F64": 8,
    "float32": 4,
    "F32": 4,
    "float16": 2,
    "F16": 2,
    "bfloat16": 2,
    "BF16": 2,
    "int8": 1,
    "I8": 1,
    "U8": 1,
    "float8_e4m3fn": 1,
    "F8_E4M3": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "BOOL": 1,
}


@dataclass(frozen=True)
class ModelShape:
    """What the planner needs to know of a model. ``kv_heads`` is 0 for an encoder."""

    params: int
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int
    max_positions: int
    weight_bytes: int | None = None  # exact, from the weight files; else params x dtype

    @property
    def weights(self) -> int:
        return (
            self.weight_bytes if self.weight_bytes is not None else self.params * self.dtype_bytes
        )

    @property
    def kv_bytes_per_token(self) -> int:
        """Keys and values, every layer: 2 x layers x kv_heads x head_dim x bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        *,
        params: int,
        dtype: str | None = None,
        weight_bytes: int | None = None,
    ) -> ModelShape:
        """From a Hugging Face ``config.json`` (GPT-2, Llama and BERT spellings)."""
        layers = _first(config, "num_hidden_layers", "n_layer")
        heads = _first(config, "num_attention_heads", "n_head")
        hidden = _first(config, "hidden_size", "n_embd")
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or hidden // heads)
        dtype_name = dtype or str(config.get("torch_dtype") or "float32")
        causal = config.get("is_decoder") or any(
            "CausalLM" in a or "LMHead" in a for a in config.get("architectures") or []
        )
        return cls(
            params=params,
            layers=layers,
            kv_heads=kv_heads if causal else 0,
            head_dim=head_dim,
            dtype_bytes=DTYPE_BYTES[dtype_name],
            max_positions=int(
                config.get("max_position_embeddings") or config.get("n_positions") or 0
            ),
            weight_bytes=weight_bytes,
        )

    @classmethod
    def from_model_dir(cls, model_dir: Path, dtype: str | None = None) -> ModelShape:
        """``config.json`` plus the safetensors headers beside it (parameter count and bytes)."""
        config = json.loads((model_dir / "config.json").read_text())
        params, weight_bytes = safetensors_size(model_dir)
        if dtype is not None and params:
            weight_bytes = params * DTYPE_BYTES[dtype]  # loaded in another dtype than stored
        return cls.from_config(config, params=params, dtype=dtype, weight_bytes=weight_bytes)


def _first(config: Mapping[str, Any], *keys: str) -> int:
    for key in keys:
        if config.get(key):
            return int(config[key])
    raise ValueError(f"the model config has none of {', '.join(keys)}")


def safetensors_size(model_dir: Path) -> tuple[int, int]:
    """Parameters and bytes of every ``*.safetensors`` file in ``model_dir``, from the files'
    headers alone."""
    found = list(tensors(model_dir))
    return sum(t.count for t in found), sum(t.count * DTYPE_BYTES[t.dtype] for t in found)


@dataclass(frozen=True)
class Measured:
    """Figures measured on the device after warm-up; they replace the estimates."""

    weight_bytes: int
    activation_bytes_per_token: int
    reserved_bytes: int = 0  # what the allocator holds (allocated plus slack)


@dataclass(frozen=True)
class MemoryPlan:
    device_bytes: int
    usable_bytes: int  # device x utilization
    weight_bytes: int
    overhead_bytes: int
    activation_bytes_per_token: int
    max_batch_tokens: int  # the largest batch the activations may take (rows x longest row)
    activation_bytes: int
    kv_bytes_per_token: int
    kv_budget_bytes: int
    kv_tokens: int  # tokens of KV cache that fit
    sequence_tokens: int  # prompt plus generated tokens a sequence is planned for
    max_sequences: int  # sequences of sequence_tokens that fit at once (encoders: rows)
    bucket_rows: dict[int, int] = field(default_factory=dict)  # bucket -> rows per batch
    measured: bool = False
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(
    shape: ModelShape,
    device_bytes: int,
    *,
    buckets: list[int],
    max_batch_tokens: int,
    activation_bytes_per_token: int,
    overhead_bytes: int,
    utilization: float = 0.9,
    max_new_tokens: int = 0,
    measured: Measured | None = None,
) -> MemoryPlan:
    """Weights, overhead and the largest batch's activations come off the usable memory;
    the rest holds KV cache. A causal LM fits ``kv_tokens // (longest bucket + max_new_tokens)``
    sequences at once, and per bucket as many rows as the KV budget and the batch budget
    both allow. An encoder has no KV cache: its rows per bucket are the batch budget (or what
    the activations leave room for) over the bucket's length."""
    warnings: list[str] = []
    weights = shape.weights
    per_token = activation_bytes_per_token
    if measured is not None:
        weights = measured.weight_bytes
        per_token = measured.activation_bytes_per_token
        if measured.reserved_bytes:
            overhead_bytes = max(overhead_bytes, measured.reserved_bytes - weights)
    usable = int(device_bytes * utilization)
    room = usable - weights - overhead_bytes
    if room <= 0:
        warnings.append(
            f"weights ({weights / GIB:.2f} GiB) and overhead ({overhead_bytes / GIB:.2f} GiB) "
            f"exceed the usable {usable / GIB:.2f} GiB"
        )
    # activation bytes per token 0: the activations are counted in the overhead
    batch_tokens = (
        min(max_batch_tokens, max(room, 0) // per_token) if per_token else max_batch_tokens
    )
    if batch_tokens < max_batch_tokens:
        warnings.append(
            f"max_batch_tokens {max_batch_tokens} does not fit; activations allow {batch_tokens}"
        )
    activations = batch_tokens * per_token
    kv_per_token = shape.kv_bytes_per_token
    kv_budget = max(room - activations, 0) if kv_per_token else 0
    kv_tokens = kv_budget // kv_per_token if kv_per_token else 0

    def tokens_of(prompt: int) -> int:  # prompt plus generated, within the context
        total = prompt + max_new_tokens
        return min(total, shape.max_positions) if shape.max_positions else total

    longest = max(buckets) if buckets else 0
    sequence_tokens = tokens_of(longest)
    rows: dict[int, int] = {}
    for bucket in sorted(buckets):
        by_batch = batch_tokens // bucket if bucket else 0
        if kv_per_token:
            rows[bucket] = min(by_batch, kv_tokens // tokens_of(bucket))
        else:
            rows[bucket] = by_batch
    if kv_per_token:
        max_sequences = kv_tokens // sequence_tokens if sequence_tokens else 0
    else:
        max_sequences = rows[min(buckets)] if buckets else 0
    return MemoryPlan(
        device_bytes=device_bytes,
        usable_bytes=usable,
        weight_bytes=weights,
        overhead_bytes=overhead_bytes,
        activation_bytes_per_token=per_token,
        max_batch_tokens=batch_tokens,
        activation_bytes=activations,
        kv_bytes_per_token=kv_per_token,
        kv_budget_bytes=kv_budget,
        kv_tokens=kv_tokens,
        sequence_tokens=sequence_tokens,
        max_sequences=max_sequences,
        bucket_rows=rows,
        measured=measured is not None,
        warnings=warnings,
    )


# A GPU batch needs far more tokens than a CPU's to pay for its fixed cost: on an H200,
# MiniLM embedded 64,537 useful tokens/s in batches of 4,096 padded tokens (the default, a
# CPU's budget) against 472,082 in batches of 65,536 (docs/benchmarks.md, "On a GPU").
GPU_BATCH_TOKENS = 65_536
GPU_BATCH_TOKENS_FLOOR = 16_384  # below it, a GPU worker's plan warns


def batch_budget_advice(on_cuda: bool, max_batch_tokens: int) -> str | None:
    """A warning when a GPU worker plans with a CPU's batch budget, else None."""
    if not on_cuda or max_batch_tokens >= GPU_BATCH_TOKENS_FLOOR:
        return None
    return (
        f"max_batch_tokens {max_batch_tokens:,} is a CPU's batch budget: a GPU batch this "
        f"small spends most of its time on its fixed cost; set HEADRACE_MAX_BATCH_TOKENS="
        f"{GPU_BATCH_TOKENS} and HEADRACE_BATCH_OVERHEAD_TOKENS on the dispatchers too "
        f"(docs/configuration.md#on-a-gpu)"
    )


CUDA_OVERHEAD_BYTES = 512 * 1024**2  # CUDA context and allocator slack
CPU_OVERHEAD_BYTES = 256 * 1024**2  # the interpreter, torch and the tokenizer


def estimated_activation_bytes_per_token(model_dir: Path, dtype_bytes: int) -> int:
    """About 12 x hidden size x bytes per token of a batch in one layer's forward pass
    (attention and MLP intermediates; inference keeps one layer's at a time). For
    all-MiniLM-L6-v2 in fp16 that is 9,216 against 8,464 measured on an H200."""
    config = json.loads((model_dir / "config.json").read_text())
    hidden = _first(config, "hidden_size", "n_embd")
    return 12 * hidden * dtype_bytes


def device_memory(device: str) -> tuple[str, int]:
    """The device's name and total bytes: a CUDA device's memory, else the memory this
    machine has available now (``MemAvailable``)."""
    import torch

    if device != "cpu" and torch.cuda.is_available():
        index = torch.device(device if device != "auto" else "cuda").index or 0
        props = torch.cuda.get_device_properties(index)
        return props.name, int(props.total_memory)
    available = 0
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    return "cpu", available or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def plan_model(
    model_dir: Path,
    device: str,
    *,
    buckets: list[int],
    max_batch_tokens: int,
    max_new_tokens: int = 256,
    utilization: float = 0.9,
    memory: dict[str, int] | None = None,
    total_bytes: int | None = None,
) -> tuple[str, MemoryPlan]:
    """The plan for a model directory on a device; ``memory`` (a backend's measured
    ``weights_bytes``, ``peak_bytes_per_token``, ``reserved_bytes``) replaces estimates;
    ``total_bytes``: plan within this much instead of the device's memory."""
    name, total = device_memory(device)
    total = total_bytes or total
    on_cuda = name != "cpu"
    dtype = "float16" if on_cuda else "float32"
    shape = ModelShape.from_model_dir(model_dir, dtype=dtype)
    measured = None
    if memory and memory.get("weights_bytes") and memory.get("peak_bytes_per_token"):
        measured = Measured(
            weight_bytes=memory["weights_bytes"],
            activation_bytes_per_token=memory["peak_bytes_per_token"],
            reserved_bytes=memory.get("reserved_bytes", 0),
        )
    planned = plan(
        shape,
        total,
        buckets=buckets,
        max_batch_tokens=max_batch_tokens,
        activation_bytes_per_token=estimated_activation_bytes_per_token(
            model_dir, DTYPE_BYTES[dtype]
        ),
        overhead_bytes=CUDA_OVERHEAD_BYTES if on_cuda else CPU_OVERHEAD_BYTES,
        utilization=utilization,
        max_new_tokens=max_new_tokens if shape.kv_heads else 0,
        measured=measured,
    )
    advice = batch_budget_advice(on_cuda, max_batch_tokens)
    if advice is not None:
        planned.warnings.append(advice)
    return name, planned
