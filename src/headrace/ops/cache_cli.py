"""``headrace cache``: the tiered result cache's figures, and invalidations sent by hand."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from headrace.config.settings import Settings
from headrace.health.reach import require

cache = typer.Typer(help="The tiered result cache.")
console = Console()


@cache.command("stats")
def cache_stats() -> None:
    """Entries in L2 and L3, and the counters the cache keeps in Redis."""
    from headrace.cache.store import open_cache

    settings = Settings()
    require(settings, "redis", "s3")
    store = open_cache(settings, l1=False)
    table = Table("figure", "value")
    table.add_row("L2 entries (Redis)", str(store.l2.entry_count()))
    if store.l3 is not None:
        objects, size = store.l3.usage()
        table.add_row("L3 objects (S3)", str(objects))
        table.add_row("L3 bytes (zstd)", str(size))
    for name, value in store.l2.stats().items():
        table.add_row(name, str(value))
    console.print(table)


@cache.command("invalidate")
def cache_invalidate(
    tenant: str = typer.Option(None, help="the tenant whose entries to invalidate"),
    tag: list[str] = typer.Option([], help="a tag of that tenant (repeatable)"),
    key: list[str] = typer.Option([], help="an entry key of that tenant (repeatable)"),
    all_of_tenant: bool = typer.Option(False, help="every entry of the tenant"),
    model: str = typer.Option(None, help="with --model-version: every entry of that version"),
    model_version: str = typer.Option(None),
) -> None:
    """Send an invalidation to <prefix>.invalidate (applied by `headrace invalidator`)."""
    from pydantic import ValidationError

    from headrace.schemas.cache import Invalidation
    from headrace.schemas.signing import invalidation_signature, tenant_key
    from headrace.schemas.topics import Topics
    from headrace.transport import open_transport

    try:
        record = Invalidation(
            tenant=tenant,
            tags=tag,
            keys=key,
            all_of_tenant=all_of_tenant,
            model=model,
            model_version=model_version,
        )
    except ValidationError as exc:
        console.print(f"[red]invalid invalidation:[/red] {exc.errors()[0]['msg']}")
        raise typer.Exit(2) from exc
    settings = Settings()
    require(settings, "kafka")
    signing = tenant_key(settings.tenant_keys_dir, tenant or "")
    if signing is not None:  # the tenant signs its records: so does this one
        signature = invalidation_signature(signing, record.signable())
        record = record.model_copy(update={"signature": signature})
    topic = Topics(settings.topic_prefix).invalidate
    transport = open_transport(settings)
    transport.ensure_topics([topic], partitions=1)
    writer = transport.writer(delivery_timeout_s=30)
    writer.send(topic, record.model_dump_json().encode())
    writer.flush()
    writer.close()
    console.print(f"sent to {topic}: {record.model_dump_json(exclude_defaults=True)}")
