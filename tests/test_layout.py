"""One home per role: where a newcomer would first look for each part, that part is, defined
there (not re-exported from elsewhere), and nothing of the same role lives outside it."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import headrace

# role -> (the module a newcomer guesses, what it must define)
GUESSES = {
    "dispatcher batching policy": ("headrace.workers.dispatcher.batcher", "DynamicBatcher"),
    "dispatcher packing": ("headrace.workers.dispatcher.packer", "PackingBatcher"),
    "dispatcher fair share": ("headrace.workers.dispatcher.fair", "FairBatcher"),
    "OpenAI files route": ("headrace.gateway.files_api", "files_router"),
    "OpenAI batches route": ("headrace.gateway.batches_api", "batches_router"),
    "Kafka workarounds": ("headrace.transport.kafka.fixes", "send"),
    "degradation ladder": ("headrace.workers.dispatcher.ladder", "LadderPolicy"),
    "model registry": ("headrace.models.registry", "ModelSpec"),
    "tenant limits": ("headrace.limits.policy", "TenantLimits"),
    "ledger": ("headrace.workers.ledger.base", "Ledger"),
    "worker composition root": ("headrace.workers.composition", "build_context"),
    "dispatcher configuration": ("headrace.workers.dispatcher.config", "CoreConfig"),
    "client configuration": ("headrace.producers.config", "ClientConfig"),
    "gateway configuration": ("headrace.gateway.config", "GatewayConfig"),
    "job runner configuration": ("headrace.jobs.run_options", "RunOptions"),
}


@pytest.mark.parametrize("role", sorted(GUESSES))
def test_each_role_is_where_a_newcomer_guesses(role: str) -> None:
    module_name, name = GUESSES[role]
    module = importlib.import_module(module_name)
    assert getattr(module, name).__module__ == module_name, f"{role}: {name} lives elsewhere"


def test_no_http_route_lives_outside_the_gateway_and_no_batcher_outside_the_dispatcher() -> None:
    misplaced = []
    for name, text in _sources():
        if name.startswith(("headrace.ops", "headrace.sql.migrations")):
            continue  # the CLI starts the gateway; migrations are alembic's scripts
        if "APIRouter(" in text and not name.startswith("headrace.gateway."):
            misplaced.append(f"{name}: an HTTP router outside headrace.gateway")
        batcher = "class " in text and "Batcher(" in text and "def take(" in text
        if batcher and not name.startswith("headrace.workers.dispatcher."):
            misplaced.append(f"{name}: a batcher outside the dispatcher package")
    assert misplaced == []


def _sources() -> list[tuple[str, str]]:
    found = []
    for info in pkgutil.walk_packages(headrace.__path__, "headrace."):
        spec = importlib.util.find_spec(info.name)  # the source, read, not run
        origin = (spec.origin if spec is not None else None) or ""
        if origin.endswith(".py"):
            found.append((info.name, Path(origin).read_text(encoding="utf-8")))
    return found


def _reads_settings(text: str) -> bool:
    """Whether the code calls ``Settings()`` bare (which reads HEADRACE_* and the TOML file
    HEADRACE_CONFIG names)."""
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "Settings"
        and not node.args
        and not node.keywords
        for node in ast.walk(ast.parse(text))
    )


def test_only_command_lines_read_the_environment() -> None:
    """Only a command's entry point builds ``Settings()``; it hands what it built down, and
    each component takes its part once (ClientConfig, GatewayConfig, CoreConfig, ...)."""
    readers = sorted(name for name, text in _sources() if _reads_settings(text))
    assert readers, "no command line reads the settings: the check reads nothing"
    others = [n for n in readers if not n.rsplit(".", 1)[-1].endswith(("cli", "doctor"))]
    assert others == []
