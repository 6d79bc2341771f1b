"""``headrace dev up|down|status``: the embedded local stack."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from headrace.config.settings import Settings

dev = typer.Typer(help="The embedded local stack (S3, Kafka-protocol broker, Redis).")
console = Console()


@dev.command("up")
def dev_up() -> None:
    """Start SeaweedFS, tansu (stored in S3) and Redis under the state directory."""
    from headrace.ops.localstack import LocalStack

    services = LocalStack(Settings()).up()
    _print_services(services)


@dev.command("down")
def dev_down() -> None:
    """Stop exactly the processes `dev up` started."""
    from headrace.ops.localstack import LocalStack

    stopped = LocalStack(Settings()).down()
    console.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@dev.command("status")
def dev_status() -> None:
    """What runs where."""
    from headrace.ops.localstack import LocalStack

    _print_services(LocalStack(Settings()).status())


def _print_services(services: list) -> None:  # type: ignore[type-arg]
    table = Table("service", "pid", "state", "address", "log")
    for s in services:
        table.add_row(s.name, str(s.pid), "up" if s.alive() else "DOWN", s.address, s.log)
    if not services:
        console.print("local stack: not started (headrace dev up)")
    else:
        console.print(table)
