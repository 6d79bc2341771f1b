"""Making a model folder's manifest, and checking a folder against one.

``describe`` reads what the model says of itself (``config.json``: architecture, type, the
positions it takes; ``tokenizer_config.json``: its ``model_max_length``; the safetensors
headers: dtype and parameter count, nothing loaded) and hashes every file. ``verify`` hashes
them again and names the first file that differs.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

from headrace.models.chat_format import detect_chat_template
from headrace.models.sources import kind_of, list_local
from headrace.models.weights import tensors
from headrace.schemas.errors import ChecksumMismatchError, ModelSourceError
from headrace.schemas.manifest import MANIFEST_FILE, ManifestFile, ModelManifest
from headrace.schemas.messages import Task

CHUNK_BYTES = 1 << 20
# what tokenizers write when a model sets no limit (transformers' VERY_LARGE_INTEGER)
UNSET_MAX_LENGTH = 10**12


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise ModelSourceError(f"{folder} has no config.json: not a Hugging Face model folder")
    try:
        config: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"{path} cannot be read as JSON ({exc})") from exc
    return config


def detect_task(config: dict[str, Any]) -> Task:
    """``generate`` for a causal LM (``*ForCausalLM``, ``*LMHeadModel``); for a sequence
    classifier (``*ForSequenceClassification``), ``rerank`` with one label (a
    cross-encoder's relevance), else ``classify``; else ``embed``."""
    architectures = config.get("architectures") or []
    causal = any("CausalLM" in a or "LMHeadModel" in a for a in architectures)
    if causal or config.get("is_decoder"):
        return "generate"
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        return "rerank" if len(labels_of(config)) == 1 else "classify"
    return "embed"


def labels_of(config: dict[str, Any]) -> list[str]:
    """A classifier's labels in its logits' order (``id2label``; else ``num_labels`` of
    them, named ``LABEL_<i>`` as transformers names them)."""
    named = config.get("id2label") or {}
    if named:
        return [str(named[k]) for k in sorted(named, key=int)]
    return [f"LABEL_{i}" for i in range(int(config.get("num_labels", 2)))]


def detect_max_tokens(config: dict[str, Any], folder: Path) -> int:
    """The positions the model takes, capped by its tokenizer's ``model_max_length``."""
    limits = [
        int(v)
        for key in ("max_position_embeddings", "n_positions", "seq_length")
        if (v := config.get(key))
    ]
    tokenizer_config = folder / "tokenizer_config.json"
    if tokenizer_config.is_file():
        declared = json.loads(tokenizer_config.read_text(encoding="utf-8")).get("model_max_length")
        if isinstance(declared, int | float) and 0 < declared < UNSET_MAX_LENGTH:
            limits.append(int(declared))
    if not limits:
        raise ModelSourceError(
            f"{folder}/config.json says no maximum length (max_position_embeddings); "
            "give --max-tokens"
        )
    return min(limits)


def safetensors_summary(folder: Path) -> tuple[str, int]:
    """(the commonest stored dtype, parameter count) of the safetensors weights."""
    dtypes: Counter[str] = Counter()
    for tensor in tensors(folder):
        dtypes[tensor.dtype] += tensor.count
    if not dtypes:
        raise ModelSourceError(f"{folder} holds no .safetensors weights")
    return dtypes.most_common(1)[0][0], sum(dtypes.values())


def hash_files(folder: Path) -> list[ManifestFile]:
    return [
        ManifestFile(
            path=rel,
            bytes=(folder / rel).stat().st_size,
            sha256=sha256_of(folder / rel),
            kind=kind_of(rel),
        )
        for rel in list_local(folder)
    ]


def describe(
    folder: Path,
    *,
    name: str,
    version: str,
    source: str,
    task: Task | None = None,
    max_tokens: int | None = None,
    label: str = "",
) -> ModelManifest:
    """The manifest of the model in ``folder`` (every file hashed)."""
    config = read_config(folder)
    dtype, params = safetensors_summary(folder)
    if not (folder / "tokenizer.json").is_file():
        raise ModelSourceError(f"{folder} has no tokenizer.json (a fast tokenizer is needed)")
    architectures = config.get("architectures") or ["unknown"]
    return ModelManifest(
        name=name,
        version=version,
        task=task or detect_task(config),
        source=source,
        architecture=str(architectures[0]),
        model_type=str(config.get("model_type", "unknown")),
        dtype=dtype,
        parameters=params,
        max_tokens=max_tokens or detect_max_tokens(config, folder),
        files=hash_files(folder),
        label=label,
        chat_template=detect_chat_template(folder),
    )


def verify(manifest: ModelManifest, folder: Path) -> None:
    """Every file of the manifest is in ``folder`` with its size and sha256; else
    ChecksumMismatchError naming the first that is not."""
    for entry in manifest.files:
        path = folder / entry.path
        where = f"{manifest.name}:{manifest.version}"
        if not path.is_file():
            raise ChecksumMismatchError(
                f"{where}: {entry.path} is missing from {folder}", entry.path
            )
        size = path.stat().st_size
        if size != entry.bytes:
            raise ChecksumMismatchError(
                f"{where}: {entry.path} is {size} bytes, the manifest says {entry.bytes}",
                entry.path,
            )
        digest = sha256_of(path)
        if digest != entry.sha256:
            raise ChecksumMismatchError(
                f"{where}: {entry.path} has sha256 {digest[:16]}…, the manifest says "
                f"{entry.sha256[:16]}… (the file changed since it was registered)",
                entry.path,
            )


def write_manifest(manifest: ModelManifest, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / MANIFEST_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
