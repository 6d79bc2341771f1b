"""``headrace doctor``: every connection, the model's files and the settings, checked once
and reported as rows (what, where, ok or the problem and its fix)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from pydantic import ValidationError

from headrace.config.settings import Settings
from headrace.health.reach import CHECKS, ServiceUnreachable


@dataclass(frozen=True)
class Finding:
    what: str
    where: str
    ok: bool
    detail: str  # the figure when ok, the problem and its fix when not


def _timed(what: str, where: str, check: Callable[[], str]) -> Finding:
    started = time.monotonic()
    try:
        detail = check()
    except ServiceUnreachable as exc:
        return Finding(what, where, False, f"{exc.reason}: {exc.service.fix()}")
    except Exception as exc:  # a doctor reports every problem as a row
        return Finding(what, where, False, f"{type(exc).__name__}: {exc}")
    return Finding(what, where, True, detail or f"{(time.monotonic() - started) * 1000:.0f} ms")


def _reached(check: Callable[[Settings], None], settings: Settings) -> str:
    check(settings)
    return ""


def _model(settings: Settings) -> str:
    from headrace.models.registry import materialize, resolve
    from headrace.models.tokenizer import load_tokenizer

    spec = resolve(settings)
    if spec.manifest is not None:  # a registered version: fetched and checked file by file
        materialize(spec, settings, check=True)
        return f"{spec.ref}, {spec.task}, max {spec.max_tokens} tokens, checksums ok"
    missing = [n for n in ("config.json", "tokenizer.json") if not (spec.path / n).exists()]
    weights = list(spec.path.glob("*.safetensors")) + list(spec.path.glob("*.bin"))
    if missing or not weights:
        raise FileNotFoundError(f"{spec.path} lacks {', '.join(missing) or 'weights'}")
    load_tokenizer(spec.path)
    return f"{spec.version}, {spec.task}, max {spec.max_tokens} tokens"


def examine() -> list[Finding]:
    try:
        settings = Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or "settings"
        return [Finding("settings", field, False, first.get("msg", str(exc)))]
    where = {
        "kafka": settings.kafka_bootstrap,
        "redis": settings.redis_url.split("@")[-1],
        "s3": settings.s3_endpoint_url,
        "sql": settings.sql_url.split("@")[-1],
    }
    found = [Finding("settings", "environment and headrace.toml", True, "valid")]
    for name, check in CHECKS.items():
        found.append(_timed(name, where[name], partial(_reached, check, settings)))
    found.append(_timed("model", settings.model, lambda: _model(settings)))
    return found
