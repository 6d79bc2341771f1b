"""``headrace models``: register model versions (``add``), look at them (``list``, ``show``),
remove one that no longer serves (``remove``). The traffic policy's commands (``deploy``,
``promote``, ``rollback``, ``status``) are in ``headrace.ops.rollout_cli``; both share
``refuse`` and ``split_ref``."""

from __future__ import annotations

import sys
from typing import get_args

import typer
from rich.console import Console
from rich.table import Table

from headrace.config.settings import Settings
from headrace.health.reach import require
from headrace.schemas.errors import ModelRegistryError
from headrace.schemas.messages import Task

models = typer.Typer(help="Model versions: register, list, show, remove; deploy and roll back.")
console = Console()
errors = Console(stderr=True)
EX_DATAERR = 65  # sysexits.h: the input (a source, a name) was wrong


def refuse(exc: Exception) -> typer.Exit:
    """A registry error as one line on stderr and exit code 65."""
    errors.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
    return typer.Exit(EX_DATAERR)


def split_ref(ref: str) -> tuple[str, str | None]:
    """``name`` or ``name:version``."""
    name, _, version = ref.partition(":")
    return name, version or None


@models.command("add")
def models_add(
    name: str = typer.Argument(..., help="the model's name (what requests ask for)"),
    source: str = typer.Option(
        ..., "--source", help="a folder, s3://BUCKET/PREFIX/ or package:MODULE"
    ),
    version: str = typer.Option(None, help="the version label (default v<N+1>)"),
    task: str = typer.Option(
        None, help="embed, generate, rerank or classify (default: config.json)"
    ),
    max_tokens: int = typer.Option(None, min=1, help="default: from the model's own config"),
    backend: str = typer.Option("auto", help="auto, transformers or vllm"),
    pooling: str = typer.Option("mean", help="encoders: mean or cls"),
    normalize: bool = typer.Option(True, help="encoders: L2-normalise embeddings"),
    label: str = typer.Option("", help="shown wherever the version is listed"),
) -> None:
    """Register a model version: hash every file, keep the manifest in the registry."""
    from headrace.models.register import manifest_folder, register

    settings = Settings()
    if source.startswith("s3://"):
        require(settings, "s3")
    require(settings, "sql")
    if task not in (None, *get_args(Task)):
        raise refuse(ModelRegistryError(f"task {task!r}: one of {', '.join(get_args(Task))}"))
    chosen: Task | None = task  # type: ignore[assignment]
    try:
        record, fetched = register(
            settings,
            name,
            source,
            version,
            task=chosen,
            max_tokens=max_tokens,
            backend=backend,
            pooling=pooling,
            normalize=normalize,
            label=label,
        )
    except ModelRegistryError as exc:
        raise refuse(exc) from exc
    m = record.manifest
    if fetched.files or fetched.skipped:
        console.print(
            f"fetched {fetched.files} files ({fetched.bytes:,} bytes; {fetched.resumed} resumed, "
            f"{fetched.skipped} already here)"
        )
    console.print(
        f"registered [bold]{record.name}:{record.version}[/bold]: {m.task}, {m.architecture} "
        f"({m.model_type}), {m.dtype}, {m.parameters:,} parameters, max {m.max_tokens} tokens, "
        f"{len(m.files)} files, {m.weights_bytes():,} bytes of weights"
    )
    folder = manifest_folder(settings, record.name, record.version)
    console.print(f"manifest: {folder / 'model-manifest.json'}")


@models.command("list")
def models_list(name: str = typer.Argument(None, help="only this model")) -> None:
    """Registered versions (the stable one of each model marked *), and the built-ins."""
    from headrace.models.catalog import ModelCatalog
    from headrace.models.registry import known_models

    settings = Settings()
    require(settings, "sql")
    catalog = ModelCatalog.for_reading(settings.sql_url)
    table = Table("model", "version", "task", "source", "warmed on", "label")
    stable: dict[str, str | None] = {}
    for record in catalog.versions(name):
        if record.name not in stable:
            stable[record.name] = catalog.serving_version(record.name)
        mark = " *" if stable[record.name] == record.version else ""
        warmed = ", ".join(sorted(record.manifest.warmed)) or "-"
        table.add_row(
            record.name, record.version + mark, record.task, record.source, warmed, record.label
        )
    for builtin in known_models():
        if builtin not in stable and name in (None, builtin):
            table.add_row(builtin, "(built-in)", "", "", "", "")
    console.print(table)


@models.command("show")
def models_show(
    ref: str = typer.Argument(..., help="NAME or NAME:VERSION (default: the stable version)"),
    json_out: bool = typer.Option(False, "--json", help="print the manifest as JSON"),
) -> None:
    """A version's manifest: files and checksums, and what loading it cost per device."""
    from headrace.models.registry import resolve
    from headrace.schemas.errors import UnknownModelError

    settings = Settings()
    require(settings, "sql")
    name, version = split_ref(ref)
    try:
        spec = resolve(settings, name, version)
    except UnknownModelError as exc:
        raise refuse(exc) from exc
    if spec.manifest is None:
        raise refuse(ModelRegistryError(f"{spec.ref} is built in: it has no manifest"))
    m = spec.manifest
    if json_out:
        sys.stdout.write(m.model_dump_json(indent=2) + "\n")
        return
    console.print(
        f"[bold]{spec.ref}[/bold] {m.task}, {m.architecture} ({m.model_type}), {m.dtype}, "
        f"{m.parameters:,} parameters, max {m.max_tokens} tokens; source {m.source}"
        + (f"; [yellow]{m.label}[/yellow]" if m.label else "")
    )
    files = Table("file", "kind", "bytes", "sha256")
    for f in m.files:
        files.add_row(f.path, f.kind, f"{f.bytes:,}", f.sha256[:16] + "…")
    console.print(files)
    for device, w in sorted(m.warmed.items()):
        peaks = ", ".join(
            f"b{b} {n / 2**20:.0f} MiB" for b, n in sorted(w.peak_bytes_per_bucket.items())
        )
        console.print(
            f"warmed on {device} by {w.worker}: load {w.load_weights_s:.2f}s, build "
            f"{w.build_s:.2f}s, warm-up {w.warm_up_s:.2f}s; {w.memory_kind}: {peaks}"
        )


@models.command("remove")
def models_remove(ref: str = typer.Argument(..., help="NAME:VERSION")) -> None:
    """Remove a version that serves no traffic (its fetched files stay in the cache)."""
    from headrace.models.register import unregister

    settings = Settings()
    require(settings, "sql")
    name, version = split_ref(ref)
    if version is None:
        raise refuse(ModelRegistryError("give NAME:VERSION"))
    try:
        unregister(settings, name, version)
    except (ModelRegistryError, LookupError) as exc:
        raise refuse(exc) from exc
    console.print(f"removed {name}:{version}")
