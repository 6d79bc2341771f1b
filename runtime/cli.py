"""The ``headrace`` command line."""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from runtime.settings import Settings

app = typer.Typer(help="headrace: a length-bucketed inference pipeline.", no_args_is_help=True)
dev = typer.Typer(help="The embedded local stack (S3, Kafka-protocol broker, Redis).")
schema = typer.Typer(help="Wire contracts.")
app.add_typer(dev, name="dev")
app.add_typer(schema, name="schema")
console = Console()


def _logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("kafka").setLevel(max(logging.WARNING, logging.getLevelName(level.upper())))


def _buckets(value: str | None, settings: Settings) -> list[int]:
    if not value or value == "all":
        return list(settings.buckets)
    return [int(v) for v in value.split(",") if v.strip()]


@dev.command("up")
def dev_up() -> None:
    """Start SeaweedFS, tansu (stored in S3) and Redis under the state directory."""
    from runtime.localstack import LocalStack

    services = LocalStack(Settings()).up()
    _print_services(services)


@dev.command("down")
def dev_down() -> None:
    """Stop exactly the processes `dev up` started."""
    from runtime.localstack import LocalStack

    stopped = LocalStack(Settings()).down()
    console.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@dev.command("status")
def dev_status() -> None:
    """What runs where."""
    from runtime.localstack import LocalStack

    _print_services(LocalStack(Settings()).status())


def _print_services(services: list) -> None:  # type: ignore[type-arg]
    table = Table("service", "pid", "state", "address", "log")
    for s in services:
        table.add_row(s.name, str(s.pid), "up" if s.alive() else "DOWN", s.address, s.log)
    if not services:
        console.print("local stack: not started (headrace dev up)")
    else:
        console.print(table)


@app.command()
def dispatcher(log_level: str = "INFO") -> None:
    """Run the dispatcher: bucket topics -> batches -> Celery queues."""
    from workers.dispatcher import Dispatcher

    _logging(log_level)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    Dispatcher(Settings()).run(stop)


@app.command()
def worker(
    buckets: str = typer.Option("all", help="comma-separated bucket bounds, or 'all'"),
    log_level: str = "INFO",
) -> None:
    """Run a Celery worker for the chosen bucket queues (model loaded and warmed up first)."""
    from workers.worker import WarmUpFailed, serve

    _logging(log_level)
    settings = Settings()
    try:
        serve(settings, _buckets(buckets, settings), loglevel=log_level)
    except WarmUpFailed as exc:
        console.print(f"[red]worker not ready:[/red] {exc}")
        raise typer.Exit(3) from exc


@app.command()
def embed(
    texts: list[str],
    tenant: str = "default",
    truncate: bool = False,
    wait_s: float = 60.0,
) -> None:
    """Embed TEXTS through the pipeline; prints one JSON reply per line."""
    from producers.client import Client
    from schemas.errors import HeadraceError

    try:
        with Client(Settings(), tenant=tenant) as client:
            for submission in client.submit_many(texts, truncate=truncate):
                reply = submission.result(wait_s)
                sys.stdout.write(reply.model_dump_json() + "\n")
    except HeadraceError as exc:
        console.print(f"[red]{type(exc).__name__}[/red] ({exc.code.value}): {exc}")
        raise typer.Exit(2) from exc


@schema.command("export")
def schema_export(directory: Path) -> None:
    """Write JSON Schema files for the wire messages into DIRECTORY."""
    from schemas.export import export_schemas

    for path in export_schemas(directory):
        console.print(str(path))


@app.command()
def demo(count: int = 300, seed: int = 7) -> None:
    """The main job: local stack, dispatcher and worker; embed mixed-length sentences."""
    from runtime.demo import run_demo

    raise typer.Exit(run_demo(Settings(), count=count, seed=seed, console=console))


@app.command()
def settings() -> None:
    """Print the effective settings (secrets masked)."""
    console.print_json(json.dumps(Settings().model_dump(mode="json")))


if __name__ == "__main__":
    app()
