"""``headrace batch ...``: bulk jobs from the command line."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from headrace.config.settings import Settings
from headrace.health.endpoint import serve_health
from headrace.health.reach import require
from headrace.jobs.formats import InputFormat
from headrace.jobs.launch import new_job, start_detached
from headrace.jobs.lease import LeaseHeld, runner_id
from headrace.jobs.lifecycle import FINAL, JobStatus
from headrace.jobs.run_options import RunOptions
from headrace.jobs.runner import JobRunner
from headrace.jobs.store import Counts, JobNotFound, JobStore
from headrace.jobs.tables import Job

batch = typer.Typer(help="Bulk jobs: a file of requests in, a file of results out.")
console = Console()

Tenant = Annotated[str, typer.Option(help="the tenant the job belongs to")]
TAKE_OVER_HINT = (
    "a runner pool takes it over once that lease runs out (job_lease_s); "
    "--take-over if that runner is gone"
)


def _store(settings: Settings, *more: str) -> JobStore:
    """The job store, once it and the ``more`` services answer (else ServiceUnreachable:
    one line, see ``headrace.ops.cli.main``)."""
    require(settings, "sql", *more)
    return JobStore(settings.sql_url)


def _job_dict(job: Job) -> dict[str, object]:
    return {
        "id": job.id,
        "status": job.status,
        "endpoint": job.endpoint,
        "input": job.input_location,
        "output": job.output_location or str(Path(job.spool_dir) / "output.jsonl"),
        "errors": job.error_location or str(Path(job.spool_dir) / "errors.jsonl"),
        "request_counts": {"total": job.total, "completed": job.completed, "failed": job.failed},
        "created_at": job.created_at.isoformat(),
        "errors_list": job.errors,
    }


def _run(
    settings: Settings,
    store: JobStore,
    job_id: str,
    wait: bool,
    truncate: bool,
    take_over: bool = False,
    owner: str | None = None,
) -> None:
    if not wait:  # a detached runner carries it out; `status` follows it
        start_detached(settings, job_id, truncate, take_over, owner)
        console.print(f"{job_id} started in the background; `headrace batch status {job_id}`")
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}/s"),
        TextColumn("[red]{task.fields[failed]} failed"),
        TimeRemainingColumn(),
        console=console,
    ) as progress:
        task: TaskID = progress.add_task(job_id, total=None, rate="-", failed=0)

        def show(job: Job, counts: Counts) -> None:
            done = counts.completed + counts.failed
            speed = progress.tasks[0].speed
            progress.update(
                task,
                total=counts.total,
                completed=done,
                failed=counts.failed,
                rate=f"{speed:.0f}" if speed else "-",
            )

        options = RunOptions.of(settings, truncate=truncate, take_over=take_over)
        runner = JobRunner(store, job_id, settings, options, on_progress=show, owner=owner)
        try:
            job = runner.run_to_end()
        except LeaseHeld as exc:
            console.print(f"[yellow]{exc}[/yellow]: {TAKE_OVER_HINT}")
            raise typer.Exit(1) from exc
    _print_job(job)


def _print_job(job: Job) -> None:
    colour = {"completed": "green", "failed": "red", "cancelled": "yellow"}.get(job.status, "cyan")
    console.print(
        f"{job.id}: [{colour}]{job.status}[/{colour}] "
        f"total {job.total}, completed {job.completed}, failed {job.failed}"
    )


@batch.command("create")
def create(
    input_location: Annotated[str, typer.Argument(help="local path or s3:// URL (.zst ok)")],
    input_format: Annotated[str, typer.Option("--format", help="openai or plain")] = "openai",
    output: Annotated[str | None, typer.Option(help="where results go (path or s3://)")] = None,
    errors: Annotated[str | None, typer.Option(help="where errors go (path or s3://)")] = None,
    model: Annotated[str | None, typer.Option(help="default model for plain lines")] = None,
    tenant: Tenant = "default",
    wait: Annotated[bool, typer.Option(help="run here with a progress bar")] = False,
    truncate: Annotated[bool, typer.Option(help="cut over-long inputs")] = False,
) -> None:
    """Create a bulk job from FILE and start it."""
    if input_format not in ("openai", "plain"):
        raise typer.BadParameter("--format is openai or plain")
    fmt: InputFormat = "plain" if input_format == "plain" else "openai"
    settings = Settings()
    if not input_location.startswith("s3://") and not Path(input_location).exists():
        raise typer.BadParameter(f"{input_location}: no such file")
    store = _store(settings, "kafka")
    if not input_location.startswith("s3://"):
        input_location = str(Path(input_location).resolve())
    job = new_job(
        store,
        settings,
        input_location,
        tenant=tenant,
        model=model,
        input_format=fmt,
        output_location=output,
        error_location=errors,
        owner=(owner := runner_id()),  # this command's runner, not a pool, carries it out
    )
    console.print(f"created {job.id}")
    _run(settings, store, job.id, wait, truncate, owner=owner)


@batch.command("run", hidden=True)
def run(
    job_id: str,
    truncate: bool = False,
    window: int = RunOptions.window,
    metrics_port: Annotated[
        int | None, typer.Option(help="serve /metrics, /healthz, /readyz on this port")
    ] = None,
    lane: Annotated[str, typer.Option(hidden=True, help="online: only to compare (bench)")] = (
        "bulk"
    ),
    take_over: bool = False,
    owner: Annotated[str | None, typer.Option(hidden=True)] = None,
) -> None:
    """Carry out a job in this process (what `create` and `resume` start in the background)."""
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    settings = Settings()
    port = metrics_port if metrics_port is not None else settings.metrics_port
    try:
        serve_health(port)
    except OSError as exc:  # several runners on one host: the port is another's
        logging.getLogger(__name__).warning("no /metrics on port %s: %s", port, exc)
    options = RunOptions.of(
        settings,
        truncate=truncate,
        window=window,
        lane="online" if lane == "online" else "bulk",
        take_over=take_over,
    )
    JobRunner(_store(settings, "kafka"), job_id, settings, options, owner=owner).run_to_end()


@batch.command("runner")
def runner_pool(
    slots: Annotated[
        int | None, typer.Option(help="bulk jobs carried at once (default: job_runners)")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="serve /metrics, /healthz, /readyz on this port")
    ] = None,
) -> None:
    """A runner pool: carries out every job no runner holds (new ones from the gateway, and
    those whose runner died, once its lease ran out) until stopped (SIGTERM or Ctrl-C:
    running jobs stop at a checkpoint and any pool carries them on)."""
    import signal
    import threading

    from headrace.health.endpoint import mark_ready
    from headrace.jobs.pool import RunnerPool

    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    settings = Settings()
    serve_health(metrics_port if metrics_port is not None else settings.metrics_port)
    pool = RunnerPool(_store(settings, "kafka", "redis"), settings, slots=slots).start()
    mark_ready()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass
    pool.close()


@batch.command("resume")
def resume(
    job_id: str,
    wait: Annotated[bool, typer.Option(help="run here with a progress bar")] = False,
    truncate: bool = False,
    take_over: Annotated[
        bool, typer.Option(help="take the job even while a runner (one that is gone) holds it")
    ] = False,
) -> None:
    """Carry on with a job whose runner stopped: lines already answered are skipped. (A
    runner pool does this by itself once the dead runner's lease runs out.)"""
    settings = Settings()
    store = _store(settings, "kafka")
    job = _get(store, job_id)
    if job.state in FINAL:
        _print_job(job)
        return
    if not take_over and not store.claimable_now(job_id):
        console.print(
            f"[yellow]{job_id} is being run by {job.lease_owner}[/yellow]: {TAKE_OVER_HINT}"
        )
        raise typer.Exit(1)
    _run(settings, store, job_id, wait, truncate, take_over)


@batch.command("status")
def status(job_id: str, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """A job's status and request counts."""
    job = _get(_store(Settings()), job_id)
    if as_json:
        print(json.dumps(_job_dict(job)))
        return
    _print_job(job)
    for error in job.errors:
        console.print(f"  [red]{error['code']}[/red]: {error['message']}")


@batch.command("list")
def list_jobs(limit: int = 20, tenant: str | None = None) -> None:
    """The newest jobs."""
    table = Table("id", "status", "total", "completed", "failed", "created")
    for job in _store(Settings()).list(tenant=tenant, limit=limit):
        table.add_row(
            job.id,
            job.status,
            str(job.total),
            str(job.completed),
            str(job.failed),
            job.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    console.print(table)


@batch.command("cancel")
def cancel(job_id: str) -> None:
    """Stop submitting; the requests already sent are cancelled and the job ends cancelled."""
    store = _store(Settings())
    job = _get(store, job_id)
    if job.state in FINAL:
        _print_job(job)
        return
    store.move(job_id, JobStatus.cancelling)
    console.print(f"{job_id}: cancelling")


@batch.command("results")
def results(
    job_id: str,
    out: Annotated[Path, typer.Option("-o", "--output", help="file to write")],
    errors: Annotated[bool, typer.Option("--errors", help="the error file instead")] = False,
) -> None:
    """Copy a job's output (or error) lines to a file; works while it runs, too."""
    job = _get(_store(Settings()), job_id)
    spool = Path(job.spool_dir) / ("errors.jsonl" if errors else "output.jsonl")
    if not spool.exists():
        raise typer.BadParameter(f"{job_id} has no {'errors' if errors else 'output'} yet")
    shutil.copyfile(spool, out)
    console.print(f"wrote {out}")


def _get(store: JobStore, job_id: str) -> Job:
    try:
        return store.get(job_id)
    except JobNotFound:
        console.print(f"[red]no job {job_id}[/red]")
        raise typer.Exit(2) from None
