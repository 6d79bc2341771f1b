"""Registering a model version: read its source (fetching an S3 prefix into the local
cache), describe it (``manifest.describe``: every file's sha256, architecture, dtype, max
tokens), keep it in the registry and write ``model-manifest.json`` beside the registry's
other records on this machine (``<state_dir>/models/<name>/<version>/``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from headrace.config.settings import Settings
from headrace.connections import s3_client
from headrace.models.catalog import ModelCatalog, RegisteredVersion
from headrace.models.manifest import describe, write_manifest
from headrace.models.registry import model_cache_root
from headrace.models.sources import FetchStats, fetch, parse_source
from headrace.schemas.errors import ModelRegistryError, VersionConflictError
from headrace.schemas.messages import Task

BACKENDS = ("auto", "transformers", "vllm")
POOLINGS = ("mean", "cls")


def manifest_folder(settings: Settings, name: str, version: str) -> Path:
    return settings.state_dir / "models" / name / version


def next_version(catalog: ModelCatalog, name: str) -> str:
    """``v<N+1>`` after the model's N registered versions (skipping labels in use)."""
    taken = {r.version for r in catalog.versions(name)}
    n = len(taken) + 1
    while f"v{n}" in taken:
        n += 1
    return f"v{n}"


def register(
    settings: Settings,
    name: str,
    source: str,
    version: str | None = None,
    *,
    task: Task | None = None,
    max_tokens: int | None = None,
    backend: str = "auto",
    pooling: str = "mean",
    normalize: bool = True,
    label: str = "",
) -> tuple[RegisteredVersion, FetchStats]:
    """Register ``source`` as ``name:version``; ModelRegistryError (a subclass names what is
    wrong) if the source cannot be read, the names are not valid, or the version exists."""
    if backend not in BACKENDS:
        raise ModelRegistryError(f"backend {backend!r}: one of {', '.join(BACKENDS)}")
    if pooling not in POOLINGS:
        raise ModelRegistryError(f"pooling {pooling!r}: one of {', '.join(POOLINGS)}")
    catalog = ModelCatalog.for_writing(settings.sql_url)
    version = version or next_version(catalog, name)
    if catalog.get(name, version) is not None:
        raise VersionConflictError(
            f"{name}:{version} is registered already (versions are immutable: register the "
            "new files under a new version)"
        )
    parsed = parse_source(source)
    folder, stats = fetch(
        parsed, lambda: s3_client(settings, read_timeout_s=60), model_cache_root(settings)
    )
    try:
        manifest = describe(
            folder,
            name=name,
            version=version,
            source=str(parsed),
            task=task,
            max_tokens=max_tokens,
            label=label,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ModelRegistryError(f"{where}: {first.get('msg')} ({first.get('input')!r})") from exc
    record = catalog.add(manifest, backend=backend, pooling=pooling, normalize=normalize)
    write_manifest(manifest, manifest_folder(settings, name, version))
    return record, stats


def unregister(settings: Settings, name: str, version: str) -> None:
    """Remove ``name:version`` from the registry (VersionConflictError while it serves)."""
    ModelCatalog.for_writing(settings.sql_url).remove(name, version)
    path = manifest_folder(settings, name, version)
    for child in path.glob("*"):
        child.unlink()
    if path.is_dir():
        path.rmdir()
