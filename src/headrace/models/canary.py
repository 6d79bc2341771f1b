"""The canary judge (pure): given what the stable and the canary version did over the last
``window_s`` (requests, model errors, p99 latency), keep the canary where it is, move it to
its next share, promote it, or roll it back.

Rolled back: the canary's error rate passes the stable one's by more than
``max_error_rate_increase``, or its p99 passes the stable one's times ``max_p99_ratio``
(judged once it has ``min_requests`` in the window). Moved up: ``step_s`` at its share,
healthy, with ``min_requests`` seen. Promoted: the same, at its last step.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from headrace.models.traffic import Canary, TrafficPolicy

Decision = Literal["hold", "step", "promote", "rollback"]


@dataclass(frozen=True)
class VersionWindow:
    """What one version did over the judged window."""

    requests: int = 0  # replies it computed or failed with a model error
    errors: int = 0  # of those, model errors
    p99_ms: float | None = None  # latency from the dispatcher reading a request to its reply
    p50_ms: float | None = None

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


def judged_seconds(canary: Canary, now: float) -> int:
    """How many whole seconds back from ``now`` (unix time) the judge looks: the rules'
    window, cut at the canary's deployment (the second it started in is left out, so what a
    version did before, an earlier canary of it rolled back for one, is never counted
    against it). 0: nothing to judge yet."""
    window = max(1, int(canary.rules.window_s))
    if canary.started_at is None:
        return window
    return max(0, min(window, int(now) - int(canary.started_at.timestamp())))


def judge(
    canary: Canary,
    stable: VersionWindow,
    trial: VersionWindow,
    now: datetime,
    window_s: float | None = None,
) -> tuple[Decision, str]:
    """The decision and why, in words; ``window_s``: the seconds the windows cover (the
    rules' window unless cut, see ``judged_seconds``)."""
    rules = canary.rules
    seen_s = rules.window_s if window_s is None else window_s
    if trial.requests >= rules.min_requests:
        excess = trial.error_rate - stable.error_rate
        if excess > rules.max_error_rate_increase:
            return "rollback", (
                f"error rate {trial.error_rate:.1%} against stable {stable.error_rate:.1%} "
                f"(+{excess:.1%} > +{rules.max_error_rate_increase:.1%}) over "
                f"{seen_s:g}s, {trial.requests} requests"
            )
        if stable.p99_ms and trial.p99_ms and trial.p99_ms > stable.p99_ms * rules.max_p99_ratio:
            return "rollback", (
                f"p99 {trial.p99_ms:.0f} ms against stable {stable.p99_ms:.0f} ms "
                f"(x{trial.p99_ms / stable.p99_ms:.2f} > x{rules.max_p99_ratio:g}) over "
                f"{seen_s:g}s"
            )
    at_step_s = (now - canary.step_started_at).total_seconds()
    if at_step_s >= rules.step_s and trial.requests >= rules.min_requests:
        last = canary.step >= len(rules.steps) - 1
        return ("promote" if last else "step"), (
            f"healthy {at_step_s:.0f}s at {canary.share:.0%}: error rate {trial.error_rate:.1%} "
            f"(stable {stable.error_rate:.1%}), p99 {trial.p99_ms or 0:.0f} ms "
            f"(stable {stable.p99_ms or 0:.0f} ms)"
        )
    return "hold", ""


def apply(policy: TrafficPolicy, decision: Decision, now: datetime) -> TrafficPolicy:
    """The policy after ``decision`` about its canary."""
    canary = policy.canary
    if canary is None or decision == "hold":
        return policy
    if decision == "rollback":
        return policy.model_copy(update={"canary": None})
    if decision == "promote":
        return promoted(policy, canary.version)
    moved = canary.model_copy(update={"step": canary.step + 1, "step_started_at": now})
    return policy.model_copy(update={"canary": moved})


def promoted(policy: TrafficPolicy, version: str) -> TrafficPolicy:
    """``version`` takes all traffic; the old stable is kept to roll back to. A shadow of the
    promoted version ends (it is what serves now)."""
    shadow = policy.shadow if policy.shadow and policy.shadow.version != version else None
    return TrafficPolicy(
        stable=version,
        previous_stable=policy.stable if policy.stable != version else policy.previous_stable,
        sticky=policy.sticky,
        shadow=shadow,
    )
