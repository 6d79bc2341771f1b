"""``model-manifest.json``: what a registered model version is, file by file.

Weights are immutable assets, not code: a version names exactly these files with these
sha256 digests, and a worker refuses to load a folder that differs. The manifest also says
what the model is (architecture, dtype, max tokens, task) and, once a worker has warmed it up
on a device, what loading it cost there (``warmed``, per device). JSON Schema:
``headrace schema export`` (``model-manifest.v1.json``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints

from headrace.schemas.messages import utc_now

MANIFEST_FILE = "model-manifest.json"

FileKind = Literal["weights", "tokenizer", "config", "other"]
ModelName = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")
]
# a version label is part of queue names and cache keys: short, no separators of its own
VersionLabel = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class ManifestFile(_Strict):
    path: str  # relative to the model folder, "/"-separated
    bytes: Annotated[int, Field(ge=0)]
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    kind: FileKind


class WarmUpShape(_Strict):
    """One warm-up batch: ``rows`` inputs of ``length`` tokens for ``bucket``."""

    bucket: int
    length: int
    rows: int


class Warmed(_Strict):
    """What the first worker to warm the version up on a device measured there."""

    device: str  # "cpu", or "cuda:<device name>"
    worker: str
    at: AwareDatetime = Field(default_factory=utc_now)
    load_weights_s: float
    build_s: float
    warm_up_s: float
    # the peak during each bucket's warm-up batch: allocated bytes on CUDA; on CPU the
    # process's peak resident set so far (it only grows, bucket by bucket)
    memory_kind: Literal["cuda_peak_allocated", "cpu_peak_rss"]
    peak_bytes_per_bucket: dict[int, int]
    shapes: list[WarmUpShape]


class ModelManifest(_Strict):
    schema_version: Literal[1] = 1
    name: ModelName
    version: VersionLabel
    task: Literal["embed", "generate", "rerank", "classify"]
    source: str  # where the files came from: a folder, s3://bucket/prefix/, package:<module>
    architecture: str  # config.json's architectures[0], e.g. BertModel, GPT2LMHeadModel
    model_type: str  # config.json's model_type, e.g. bert, gpt2, llama, qwen2
    dtype: str  # the stored weights' dtype, from the safetensors headers
    parameters: int
    max_tokens: int
    files: list[ManifestFile]
    label: str = ""  # e.g. "TEST VERSION: perturbed weights", shown wherever it is listed
    created_at: AwareDatetime = Field(default_factory=utc_now)
    warmed: dict[str, Warmed] = Field(default_factory=dict)  # by device
    # its own chat template: none, one without a tool format (plain), one with (tools)
    chat_template: Literal["none", "plain", "tools"] = "none"

    def weights_bytes(self) -> int:
        return sum(f.bytes for f in self.files if f.kind == "weights")

    def file(self, path: str) -> ManifestFile | None:
        return next((f for f in self.files if f.path == path), None)
