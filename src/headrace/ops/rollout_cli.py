"""``headrace models deploy|promote|rollback|status``: which versions serve a model, changed
while it runs (every dispatcher reads the policy again within about a second). The commands
join the ``models`` group in ``headrace.ops.cli``."""

from __future__ import annotations

import time

import typer
from rich.console import Console
from rich.table import Table

from headrace.config.settings import Settings
from headrace.health.reach import require
from headrace.models.traffic import TrafficPolicy
from headrace.ops.models_cli import refuse, split_ref
from headrace.schemas.errors import ModelRegistryError, UnknownModelError

console = Console()


def _describe(policy: TrafficPolicy) -> str:
    shares = ", ".join(f"{v} {s:.0%}" for v, s in sorted(policy.weights().items()))
    parts = [f"stable {policy.stable}", f"serving {shares}"]
    if policy.split:
        parts.append(f"sticky by {policy.sticky}")
    if policy.canary is not None:
        c = policy.canary
        parts.append(f"canary {c.version} at step {c.step + 1}/{len(c.rules.steps)}")
    if policy.shadow is not None:
        parts.append(f"shadow {policy.shadow.version} ({policy.shadow.share:.0%} of requests)")
    return "; ".join(parts)


def deploy(
    ref: str = typer.Argument(..., help="NAME:VERSION, registered"),
    canary: bool = typer.Option(False, "--canary", help="a canary: steps up, or rolled back"),
    split_percent: float = typer.Option(
        None, "--split", help="a fixed split: the version's percent of the traffic"
    ),
    shadow: bool = typer.Option(False, "--shadow", help="computed alongside, compared, unseen"),
    steps: str = typer.Option("5,25,50", help="canary: percent at each step"),
    step_s: float = typer.Option(60.0, help="canary: seconds at a step, healthy, to move up"),
    window_s: float = typer.Option(30.0, help="canary: the window both versions are judged on"),
    min_requests: int = typer.Option(20, help="canary: requests in the window to judge"),
    max_error_increase: float = typer.Option(
        0.05, help="canary: rolled back past stable's error rate plus this"
    ),
    max_p99_ratio: float = typer.Option(2.0, help="canary: rolled back past stable's p99 x this"),
    sticky: str = typer.Option("request", help="split: request, tenant or key"),
    share: float = typer.Option(1.0, help="shadow: the share of requests copied"),
) -> None:
    """Serve NAME:VERSION beside the stable version: as a canary, a split, or a shadow."""
    from pydantic import ValidationError

    from headrace.models import rollout
    from headrace.models.catalog import ModelCatalog
    from headrace.models.traffic import CanaryRules

    name, version = split_ref(ref)
    if version is None:
        raise refuse(ModelRegistryError("give NAME:VERSION"))
    if [canary, split_percent is not None, shadow].count(True) != 1:
        raise refuse(ModelRegistryError("choose one of --canary, --split PERCENT, --shadow"))
    settings = Settings()
    require(settings, "sql")
    try:
        if canary:
            rules = CanaryRules(
                steps=tuple(float(p) / 100 for p in steps.split(",") if p.strip()),
                step_s=step_s,
                window_s=window_s,
                min_requests=min_requests,
                max_error_rate_increase=max_error_increase,
                max_p99_ratio=max_p99_ratio,
            )
            policy, revision = rollout.change(
                ModelCatalog.for_writing(settings.sql_url),
                name,
                lambda p: rollout.canary(p, version, rules),
                action="deploy",
            )
        elif split_percent is not None:
            if sticky not in ("request", "tenant", "key"):
                raise ModelRegistryError(f"sticky {sticky!r}: request, tenant or key")
            policy, revision = rollout.change(
                ModelCatalog.for_writing(settings.sql_url),
                name,
                lambda p: rollout.split(p, version, split_percent, sticky),  # type: ignore[arg-type]
                action="deploy",
            )
        else:
            policy, revision = rollout.change(
                ModelCatalog.for_writing(settings.sql_url),
                name,
                lambda p: rollout.shadow(p, version, share),
                action="deploy",
            )
    except (ModelRegistryError, UnknownModelError, ValidationError, ValueError) as exc:
        raise refuse(exc) from exc
    console.print(f"{name} revision {revision}: {_describe(policy)}")


def promote(
    ref: str = typer.Argument(..., help="NAME (the canary's version) or NAME:VERSION"),
) -> None:
    """Make a version the stable one: it takes all traffic (the old one is kept to roll
    back to)."""
    from headrace.models import rollout
    from headrace.models.catalog import ModelCatalog

    name, version = split_ref(ref)
    settings = Settings()
    require(settings, "sql")
    try:
        policy, revision = rollout.change(
            ModelCatalog.for_writing(settings.sql_url),
            name,
            lambda p: rollout.promote(p, version),
            action="promote",
        )
    except (ModelRegistryError, UnknownModelError) as exc:
        raise refuse(exc) from exc
    console.print(f"{name} revision {revision}: {_describe(policy)}")


def rollback(name: str = typer.Argument(..., help="the model")) -> None:
    """Undo the newest change: a canary, else a split, else a shadow, else a promotion."""
    from headrace.models import rollout
    from headrace.models.catalog import ModelCatalog

    settings = Settings()
    require(settings, "sql")
    undone: list[str] = []

    def back(policy: TrafficPolicy) -> TrafficPolicy:
        new, what = rollout.rollback(policy)
        undone[:] = [what]
        return new

    try:
        policy, revision = rollout.change(
            ModelCatalog.for_writing(settings.sql_url), name, back, action="rollback"
        )
    except (ModelRegistryError, UnknownModelError) as exc:
        raise refuse(exc) from exc
    console.print(f"{name} revision {revision}: rolled back the {undone[0]}; {_describe(policy)}")


def status(
    name: str = typer.Argument(None, help="the model (default: the pipeline's)"),
    window_s: float = typer.Option(60.0, help="the window of each version's figures"),
) -> None:
    """The policy, live workers per version, what each version did lately, the shadow's
    comparison, recent policy changes and worker loads."""
    from headrace import connections
    from headrace.models.catalog import ModelCatalog
    from headrace.workers.comparisons import Comparisons
    from headrace.workers.ledger import RedisLedger
    from headrace.workers.loading import LoadRecords
    from headrace.workers.version_stats import VersionStats

    settings = Settings()
    require(settings, "sql", "redis")
    model = name or settings.model
    catalog = ModelCatalog.for_reading(settings.sql_url)
    policy, revision = catalog.policy(model)
    stable = policy.stable if policy else catalog.serving_version(model)
    console.print(
        f"[bold]{model}[/bold] revision {revision}: "
        + (_describe(policy) if policy else f"stable {stable or '(built-in)'}; no policy")
    )
    client = connections.redis_client(settings)
    ledger = RedisLedger(client, settings.topic_prefix, settings.answered_ttl_s)
    live = ledger.live_workers(settings.buckets, 3 * settings.worker_heartbeat_s)
    workers = sorted(set().union(*live.values()))
    info = ledger.worker_info(workers)
    versions = sorted(
        {str(i.get("version")) for i in info.values()} | (policy.versions() if policy else set())
    )
    stats = VersionStats(client, settings.topic_prefix, model)
    table = Table(title=f"versions (last {window_s:g}s)")
    columns = ("version", "workers", "req/s", "share", "target", "errors", "p50 ms", "p99 ms")
    for column in columns:
        table.add_column(column, justify="left" if column == "version" else "right")
    now = time.time()
    windows = {v: stats.window(v, now, window_s) for v in versions}
    total = sum(w.requests for w in windows.values())
    targets = policy.weights() if policy is not None else {stable: 1.0}
    for version, w in windows.items():
        count = sum(1 for i in info.values() if i.get("version") == version)
        target = targets.get(version, 0.0)
        share = w.requests / total if total else 0.0
        table.add_row(
            version + (" *" if version == stable else ""),
            str(count),
            f"{w.requests / window_s:.1f}",
            f"{share:.1%}" if total else "-",
            f"{target:.1%}" + (f" ({(share - target) * 100:+.1f} pt)" if total else ""),
            f"{w.error_rate:.1%}",
            f"{w.p50_ms:.0f}" if w.p50_ms else "-",
            f"{w.p99_ms:.0f}" if w.p99_ms else "-",
        )
    console.print(table)
    if policy is not None and policy.shadow is not None:
        found = Comparisons(client, settings.topic_prefix, model).summary(
            policy.stable, policy.shadow.version
        )
        console.print(f"shadow {policy.shadow.version} against {policy.stable}: {found}")
    for event in catalog.events(model, 8):
        reason = event.detail.get("reason", "")
        console.print(
            f"  r{event.revision} {event.at:%Y-%m-%d %H:%M:%S} {event.action} by {event.actor}"
            + (f": {reason}" if reason else "")
        )
    for record in LoadRecords(client, settings.topic_prefix).recent(5):
        if record.outcome != "ok":
            console.print(
                f"  load of {record.model} on {record.worker_id}: {record.stage} "
                f"{record.outcome} (exit {record.exit_code}): {record.message}"
            )
