"""Which versions of a model serve, and how: a model's traffic policy (pure; stored in the
SQL registry, changed by ``headrace models deploy|promote|rollback`` and by the canary
judge, read by every dispatcher about once a second).

- **stable**: the version that takes whatever no other rule takes, and every request whose
  version has no live worker for its bucket.
- **split**: weights per version (stable included); a request's version is drawn from a
  hash of its ``sticky`` subject: ``request`` (its id), ``tenant``, or ``key`` (the
  request's ``routing_key``, else its id), so the same subject always lands on the same
  version while the weights stand.
- **canary**: one version takes ``steps[step]`` of the traffic; the judge
  (``headrace.models.canary``) moves it a step up after ``step_s`` while it is healthy,
  promotes it after the last step, and rolls it back when its error rate or p99 latency
  passes the stable version's by more than the rules allow over ``window_s``.
- **shadow**: a ``share`` of requests is also computed by the shadow version; its results are
  compared with the served ones and never sent to anyone.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from headrace.schemas.manifest import VersionLabel
from headrace.schemas.messages import utc_now

Sticky = Literal["request", "tenant", "key"]
Share = Annotated[float, Field(gt=0.0, le=1.0)]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CanaryRules(_Frozen):
    steps: tuple[Share, ...] = (0.05, 0.25, 0.5)
    step_s: float = Field(default=60.0, gt=0)  # at each step this long, if healthy
    window_s: float = Field(default=30.0, gt=0)  # both versions compared over this window
    min_requests: int = Field(default=20, ge=1)  # canary requests in the window to judge
    # rolled back when its error rate passes stable's by more than this (absolute) ...
    max_error_rate_increase: float = Field(default=0.05, ge=0, le=1)
    # ... or its p99 latency passes stable's times this
    max_p99_ratio: float = Field(default=2.0, ge=1.0)

    @model_validator(mode="after")
    def _rising(self) -> CanaryRules:
        if not self.steps or list(self.steps) != sorted(self.steps):
            raise ValueError("canary steps rise: e.g. 0.05, 0.25, 0.5")
        return self


class Canary(_Frozen):
    version: VersionLabel
    step: int = Field(default=0, ge=0)
    step_started_at: AwareDatetime = Field(default_factory=utc_now)
    # when it was deployed: the judge counts nothing from before (a policy stored without it
    # is judged over the rules' whole window)
    started_at: AwareDatetime | None = None
    rules: CanaryRules = CanaryRules()

    @property
    def share(self) -> float:
        return self.rules.steps[min(self.step, len(self.rules.steps) - 1)]


class Shadow(_Frozen):
    version: VersionLabel
    share: Share = 1.0


class TrafficPolicy(_Frozen):
    stable: VersionLabel
    previous_stable: VersionLabel | None = None  # what rolling back a promote returns to
    split: dict[VersionLabel, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
    sticky: Sticky = "request"
    canary: Canary | None = None
    shadow: Shadow | None = None

    @model_validator(mode="after")
    def _consistent(self) -> TrafficPolicy:
        if self.canary is not None and self.canary.version == self.stable:
            raise ValueError(f"the canary {self.canary.version!r} is the stable version")
        if self.shadow is not None and self.shadow.version == self.stable:
            raise ValueError(f"the shadow {self.shadow.version!r} is the stable version")
        if self.canary is not None and self.split:
            raise ValueError("a canary and a split cannot run at once")
        return self

    def versions(self) -> set[str]:
        """Every version the policy names."""
        named = {self.stable, *self.split}
        if self.canary is not None:
            named.add(self.canary.version)
        if self.shadow is not None:
            named.add(self.shadow.version)
        return named

    def weights(self) -> dict[str, float]:
        """Each serving version's share of the traffic (summing to 1)."""
        base = dict(self.split) or {self.stable: 1.0}
        total = sum(base.values())
        shares = {v: w / total for v, w in base.items()}
        if self.canary is not None:
            c = self.canary.share
            shares = {v: s * (1 - c) for v, s in shares.items()}
            shares[self.canary.version] = shares.get(self.canary.version, 0.0) + c
        return shares


def unit_hash(*parts: str) -> float:
    """A number in [0, 1) from ``parts``, the same in every process and language (the first
    8 bytes of their SHA-256, big-endian, over 2**64)."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def subject(policy: TrafficPolicy, tenant: str, request_id: str, routing_key: str | None) -> str:
    match policy.sticky:
        case "tenant":
            return f"tenant:{tenant}"
        case "key":
            return f"key:{tenant}:{routing_key or request_id}"
        case _:
            return f"request:{tenant}:{request_id}"


def assign(
    policy: TrafficPolicy,
    tenant: str,
    request_id: str,
    routing_key: str | None = None,
    live: frozenset[str] | None = None,
) -> str:
    """The version that serves this request. ``live``: the versions with a live worker for
    its bucket (None: do not check); a version without one gives way to the stable version
    (when that one has a worker)."""
    who = subject(policy, tenant, request_id, routing_key)
    chosen = policy.stable
    if policy.canary is not None and unit_hash("canary", who) < policy.canary.share:
        chosen = policy.canary.version
    elif policy.split:
        u = unit_hash("split", who)
        total = sum(policy.split.values())
        edge = 0.0
        for version in sorted(policy.split):
            edge += policy.split[version] / total
            if u < edge:
                chosen = version
                break
        else:
            chosen = sorted(policy.split)[-1]
    if live is not None and chosen not in live and policy.stable in live:
        return policy.stable
    return chosen


def shadowed(policy: TrafficPolicy, tenant: str, request_id: str, served_by: str) -> str | None:
    """The shadow version that also computes this request, if the policy samples it."""
    shadow = policy.shadow
    if shadow is None or shadow.version == served_by:
        return None
    if unit_hash("shadow", tenant, request_id) >= shadow.share:
        return None
    return shadow.version
