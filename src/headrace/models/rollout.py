"""Changing which versions serve: deploy (a canary, a split, a shadow), promote, roll back.

Each change is a pure function of the current policy (``TrafficPolicy``); ``change`` applies
one to the registry as a read-modify-write on the policy's revision, trying again when
another writer (an operator, a dispatcher's canary judge) changed it in between.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from headrace.models.canary import promoted
from headrace.models.catalog import ModelCatalog
from headrace.models.traffic import Canary, CanaryRules, Shadow, Sticky, TrafficPolicy
from headrace.schemas.errors import ModelRegistryError, UnknownModelError

ATTEMPTS = 5


class RolloutError(ModelRegistryError):
    """The change does not apply to the current policy (the message says why)."""


def canary(policy: TrafficPolicy, version: str, rules: CanaryRules) -> TrafficPolicy:
    if policy.split:
        raise RolloutError("a split is running: roll it back before starting a canary")
    if version == policy.stable:
        raise RolloutError(f"{version} is the stable version already")
    now = datetime.now(UTC)
    started = Canary(version=version, rules=rules, step_started_at=now, started_at=now)
    return policy.model_copy(update={"canary": started})


def split(policy: TrafficPolicy, version: str, percent: float, sticky: Sticky) -> TrafficPolicy:
    if policy.canary is not None:
        raise RolloutError("a canary is running: promote or roll it back first")
    if not 0 < percent < 100:
        raise RolloutError(f"a split gives the new version between 0 and 100 percent ({percent})")
    if version == policy.stable:
        raise RolloutError(f"{version} is the stable version already")
    weights = {policy.stable: 100.0 - percent, version: percent}
    return policy.model_copy(update={"split": weights, "sticky": sticky})


def shadow(policy: TrafficPolicy, version: str, share: float) -> TrafficPolicy:
    if version == policy.stable:
        raise RolloutError(f"{version} is the stable version: it cannot shadow itself")
    return policy.model_copy(update={"shadow": Shadow(version=version, share=share)})


def promote(policy: TrafficPolicy, version: str | None) -> TrafficPolicy:
    """``version`` (default: the canary's, else the split's other version) takes all
    traffic."""
    if version is None:
        if policy.canary is not None:
            version = policy.canary.version
        elif policy.split:
            others = [v for v in policy.split if v != policy.stable]
            version = others[0] if len(others) == 1 else None
        if version is None:
            raise RolloutError("nothing to promote: name the version")
    if version == policy.stable and policy.canary is None and not policy.split:
        raise RolloutError(f"{version} is the stable version already")
    return promoted(policy, version)


def rollback(policy: TrafficPolicy) -> tuple[TrafficPolicy, str]:
    """Undo the newest kind of change: a canary, else a split, else a shadow, else the last
    promotion. Returns the policy and what was undone."""
    if policy.canary is not None:
        return policy.model_copy(update={"canary": None}), f"canary {policy.canary.version}"
    if policy.split:
        return policy.model_copy(update={"split": {}}), "split " + ", ".join(sorted(policy.split))
    if policy.shadow is not None:
        return policy.model_copy(update={"shadow": None}), f"shadow {policy.shadow.version}"
    if policy.previous_stable is not None:
        back = TrafficPolicy(stable=policy.previous_stable, sticky=policy.sticky)
        return back, f"promotion of {policy.stable} (back to {policy.previous_stable})"
    raise RolloutError("nothing to roll back: the stable version serves alone")


def change(
    catalog: ModelCatalog,
    model: str,
    transform: Callable[[TrafficPolicy], TrafficPolicy],
    *,
    action: str,
    actor: str = "cli",
    detail: dict[str, Any] | None = None,
    check_versions: bool = True,
) -> tuple[TrafficPolicy, int]:
    """Apply ``transform`` to the model's policy (a model with none yet starts from its
    stable version alone); the new policy and its revision."""
    for _ in range(ATTEMPTS):
        current, revision = catalog.policy(model)
        if current is None:
            stable = catalog.serving_version(model)
            if stable is None:
                raise UnknownModelError(f"{model} has no registered version")
            current = TrafficPolicy(stable=stable)
        new = transform(current)
        if check_versions:
            _registered(catalog, model, new)
        written = catalog.set_policy(
            model, new, expected_revision=revision, action=action, actor=actor, detail=detail
        )
        if written is not None:
            return new, written
    raise RolloutError(f"the policy of {model} kept changing under {ATTEMPTS} attempts")


def _registered(catalog: ModelCatalog, model: str, policy: TrafficPolicy) -> None:
    """Every version the policy names is registered, for the same task."""
    tasks = {}
    for version in sorted(policy.versions()):
        record = catalog.get(model, version)
        if record is None:
            raise UnknownModelError(f"{model}:{version} is not registered")
        tasks[version] = record.task
    if len(set(tasks.values())) > 1:
        raise RolloutError(f"the versions serve different tasks: {tasks}")
