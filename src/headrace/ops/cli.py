"""The ``headrace`` command line."""

from __future__ import annotations

import faulthandler
import json
import logging
import signal
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NoReturn, cast

import typer
from rich.console import Console
from rich.table import Table

from headrace.config.settings import Settings
from headrace.health.reach import explain, require
from headrace.jobs.cli import batch
from headrace.ops.buckets_cli import buckets
from headrace.ops.cache_cli import cache
from headrace.ops.dev_cli import dev
from headrace.ops.limits_cli import limits
from headrace.ops.models_cli import models
from headrace.ops.observe_cli import cost, top
from headrace.ops.rollout_cli import deploy, promote, rollback, status

app = typer.Typer(
    help="headrace: a length-bucketed inference pipeline.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # locals may hold secrets
)
schema = typer.Typer(help="Wire contracts.")
app.add_typer(dev, name="dev")
app.add_typer(schema, name="schema")
app.add_typer(cache, name="cache")
app.add_typer(batch, name="batch")
app.add_typer(cost, name="cost")
app.add_typer(limits, name="limits")
app.add_typer(models, name="models")
for _rollout in (deploy, promote, rollback, status):
    models.command()(_rollout)
app.add_typer(buckets, name="buckets")
app.command()(top)
api_key = typer.Typer(help="Gateway API keys (bearer tokens mapped to tenants).")
app.add_typer(api_key, name="api-key")
console = Console()
errors = Console(stderr=True)
EX_UNAVAILABLE = 69  # sysexits.h: a service this command needs is unavailable
_options = {"debug": False}


@app.callback()
def _global(
    debug: bool = typer.Option(False, "--debug", help="show the traceback behind an error"),
) -> None:
    _options["debug"] = debug


def main() -> None:
    """The ``headrace`` command: a service that cannot be reached is one line naming it,
    where it was looked for and what to do (the traceback only with ``--debug``)."""
    try:
        app()
    except Exception as exc:
        unreachable = None if _options["debug"] else explain(exc, _quiet_settings())
        if unreachable is None:
            raise
        errors.print(f"[red]error:[/red] {unreachable}", highlight=False, soft_wrap=True)
        sys.exit(EX_UNAVAILABLE)


def _quiet_settings() -> Settings:
    try:
        return Settings()
    except Exception:  # settings that do not load: explain with the defaults
        return Settings.model_construct()


def _needs(*services: str) -> Settings:
    """The settings, once every one of ``services`` answered (else ServiceUnreachable)."""
    settings = Settings()
    require(settings, *services)
    return settings


def _logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("kafka").setLevel(max(logging.WARNING, logging.getLevelName(level.upper())))
    # `kill -USR1 <pid>` prints every thread's stack to stderr: what a wedged service waits on
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def _stop_on_signal() -> threading.Event:
    """An event set by SIGTERM or SIGINT, for a long-running command's loop."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return stop


def _buckets(value: str | None, settings: Settings) -> list[int]:
    if not value or value == "all":
        return list(settings.buckets)
    return [int(v) for v in value.split(",") if v.strip()]


MetricsPort = typer.Option(None, help="serve /metrics, /healthz, /readyz on this port")


def _serve_health(port: int | None, settings: Settings, service: str) -> None:
    """/metrics, /healthz, /readyz on ``port`` (or the setting), and the span exporter."""
    from headrace.health.endpoint import serve_health
    from headrace.health.tracing import configure

    serve_health(port if port is not None else settings.metrics_port)
    configure(settings.tracing_exporter, f"headrace-{service}")


@app.command()
def dispatcher(log_level: str = "INFO", metrics_port: int | None = MetricsPort) -> None:
    """Run the dispatcher: bucket topics -> batches -> Celery queues."""
    from headrace.workers.dispatcher.io.shell import Dispatcher

    _logging(log_level)
    settings = _needs("kafka", "redis", "sql")  # sql: the model registry
    _serve_health(metrics_port, settings, "dispatcher")
    service = Dispatcher(settings)
    # `kill -USR2 <pid>`: log each partition's position, high watermark and pause state
    signal.signal(signal.SIGUSR2, lambda *_: service.report_requested.set())
    service.run(_stop_on_signal())


@app.command()
def worker(
    buckets: str = typer.Option("all", help="comma-separated bucket bounds, or 'all'"),
    log_level: str = "INFO",
    plan: bool = typer.Option(False, "--plan", help="print the memory plan and exit"),
    max_new_tokens: int = typer.Option(256, help="with --plan: tokens a sequence generates"),
    metrics_port: int | None = MetricsPort,
) -> None:
    """Run a Celery worker for the chosen bucket queues (model loaded and warmed up first)."""
    from headrace.workers.loading import LoadFailed
    from headrace.workers.worker import serve

    _logging(log_level)
    settings = Settings()
    if plan:
        _print_plan(settings, _buckets(buckets, settings), max_new_tokens)
        return
    require(settings, "kafka", "redis", "sql")  # sql: the model registry
    _serve_health(metrics_port, settings, "worker")
    try:
        serve(settings, _buckets(buckets, settings), loglevel=log_level)
    except LoadFailed as exc:
        errors.print(f"[red]worker not ready:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from exc


def _print_plan(settings: Settings, buckets: list[int], max_new_tokens: int) -> None:
    from headrace.models.registry import materialize, resolve
    from headrace.workers.memory_plan import GIB, plan_model

    spec = resolve(settings)
    materialize(spec, settings, {"config", "weights"})
    device, p = plan_model(
        spec.path,
        settings.device,
        buckets=buckets,
        max_batch_tokens=settings.max_batch_tokens,
        max_new_tokens=max_new_tokens,
    )
    table = Table(title=f"memory plan: {spec.name} on {device} (estimated)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("device memory", f"{p.device_bytes / GIB:.2f} GiB"),
        ("usable (x0.9)", f"{p.usable_bytes / GIB:.2f} GiB"),
        ("weights", f"{p.weight_bytes / GIB:.3f} GiB"),
        ("overhead", f"{p.overhead_bytes / GIB:.2f} GiB"),
        ("activation bytes / token", f"{p.activation_bytes_per_token:,}"),
        ("max batch tokens", f"{p.max_batch_tokens:,}"),
    ]
    if p.kv_bytes_per_token:  # a causal LM; an encoder keeps no KV cache
        rows += [
            ("KV bytes / token", f"{p.kv_bytes_per_token:,}"),
            ("KV cache tokens", f"{p.kv_tokens:,}"),
            (f"sequences of {p.sequence_tokens} tokens at once", f"{p.max_sequences:,}"),
        ]
    rows += [(f"rows per batch, bucket {b}", f"{n:,}") for b, n in p.bucket_rows.items()]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    for warning in p.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")


@app.command()
def gateway(
    host: str = "127.0.0.1",
    port: int = 8080,
    log_level: str = "info",
) -> None:
    """Serve the OpenAI-compatible HTTP gateway (files, batches, embeddings)."""
    import uvicorn

    from headrace.gateway.gateway import create_app
    from headrace.health.tracing import configure

    settings = _needs("sql", "kafka", "redis")
    configure(settings.tracing_exporter, "headrace-gateway")
    uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level)


@api_key.command("create")
def api_key_create(
    tenant: str = typer.Option(..., help="the tenant this key acts for"),
    label: str = "",
    expires_in_days: float | None = typer.Option(None, help="the key stops working after"),
    priority: str = typer.Option(
        "default", help="class of its requests that name none: interactive, default, sheddable"
    ),
) -> None:
    """Make a new gateway API key for TENANT; it is printed once, only its hash is kept."""
    from headrace.jobs.store import JobStore
    from headrace.schemas.params import Priority
    from headrace.schemas.tenants import TenantNameError

    expires = None
    if expires_in_days is not None:
        expires = datetime.now(UTC) + timedelta(days=expires_in_days)
    try:
        if priority not in ("interactive", "default", "sheddable"):
            _fail(f"--priority {priority!r}: one of interactive, default, sheddable")
        store = JobStore(_needs("sql").sql_url)
        print(store.add_api_key(tenant, label, expires, cast(Priority, priority)))
    except TenantNameError as exc:
        _fail(str(exc))


@api_key.command("list")
def api_key_list(tenant: str | None = typer.Option(None, help="only this tenant's")) -> None:
    """The gateway's API keys (the start of each hash, never the key)."""
    from headrace.jobs.store import JobStore

    table = Table("hash", "tenant", "label", "created", "expires")
    for k in JobStore(_needs("sql").sql_url).api_keys(tenant):
        expires = k.expires_at.isoformat(timespec="seconds") if k.expires_at else "never"
        table.add_row(
            k.hash_prefix, k.tenant, k.label, k.created_at.isoformat(timespec="seconds"), expires
        )
    console.print(table)


@api_key.command("revoke")
def api_key_revoke(key: str = typer.Argument(..., help="the key, or its hash as listed")) -> None:
    """Revoke an API key: it names no tenant from now on."""
    from headrace.jobs.store import JobStore

    if JobStore(_needs("sql").sql_url).revoke_api_key(key) != 1:
        _fail(f"no single API key matches {key!r} (give the key or 8+ digits of its hash)")
    print("revoked")


@app.command()
def invalidator(log_level: str = "INFO", metrics_port: int | None = MetricsPort) -> None:
    """Run the invalidation consumer: upstream events and <prefix>.invalidate -> evictions
    (and the session archiver)."""
    from headrace.consumers.invalidation import Invalidator

    _logging(log_level)
    settings = _needs("kafka", "redis", "s3")
    _serve_health(metrics_port, settings, "invalidator")
    Invalidator(settings).run(_stop_on_signal())


@app.command()
def embed(
    texts: list[str],
    tenant: str = "default",
    truncate: bool = False,
    wait_s: float = 60.0,
) -> None:
    """Embed TEXTS through the pipeline; prints one JSON reply per line."""
    from headrace.producers.client import Client
    from headrace.schemas.errors import HeadraceError

    try:
        with Client(_needs("kafka"), tenant=tenant) as client:
            for submission in client.submit_many(texts, truncate=truncate):
                reply = submission.result(wait_s)
                sys.stdout.write(reply.model_dump_json() + "\n")
    except HeadraceError as exc:
        console.print(f"[red]{type(exc).__name__}[/red] ({exc.code.value}): {exc}")
        raise typer.Exit(2) from exc


@schema.command("export")
def schema_export(directory: Path) -> None:
    """Write JSON Schema files for the wire messages into DIRECTORY."""
    from headrace.schemas.export import export_schemas

    for path in export_schemas(directory):
        console.print(str(path))


@app.command()
def demo(
    count: int = 300,
    seed: int = 7,
    metrics: bool = typer.Option(True, help="serve /metrics on free ports, for `headrace top`"),
) -> None:
    """The main job: local stack, dispatcher and worker; embed mixed-length sentences."""
    from headrace.ops.demo import run_demo

    raise typer.Exit(run_demo(Settings(), count=count, seed=seed, console=console, metrics=metrics))


@app.command()
def init() -> None:
    """One-shot setup of a deployment: create every topic of this prefix (request buckets,
    the unbucketed ingress, control, invalidate, dead letter) and bring the job store's
    schema up to date. Safe to run again."""
    from headrace.jobs.store import JobStore
    from headrace.schemas.topics import LANES, Topics
    from headrace.transport import open_transport

    settings = _needs("kafka", "sql")
    topics = Topics(settings.topic_prefix)
    buckets = [topics.requests(b, lane) for b in settings.buckets for lane in LANES]
    transport = open_transport(settings)
    try:
        transport.ensure_topics([*buckets, topics.ingress, topics.dead_letter])
        transport.ensure_topics([topics.control, topics.invalidate], partitions=1)
    finally:
        transport.close()
    revision = JobStore(settings.sql_url).revision()
    console.print(f"topics: {len(buckets) + 4} of prefix {settings.topic_prefix!r} exist")
    console.print(f"job store: at revision {revision}")


@app.command()
def doctor() -> None:
    """Check every connection, the model's files and the settings; exit 1 if one fails."""
    from headrace.ops.doctor import examine

    table = Table("check", "where", "", "detail")
    findings = examine()
    for f in findings:
        mark = "[green]ok[/green]" if f.ok else "[red]FAIL[/red]"
        table.add_row(f.what, f.where, mark, f.detail)
    console.print(table)
    if not all(f.ok for f in findings):
        raise typer.Exit(1)


@app.command()
def settings() -> None:
    """Print the effective settings (secrets masked)."""
    shown = Settings().model_dump(mode="json")
    shown["sql_url"] = masked_url(shown["sql_url"])
    console.print_json(json.dumps(shown))


def masked_url(url: str) -> str:
    """A database URL with its password as ``***``."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL sqlalchemy reads: show nothing of it
        return "***"


def _fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(2)


if __name__ == "__main__":
    main()
