"""The canary judge (pure, times given): errors or latency past the rules roll it back;
health for ``step_s`` moves it up, then promotes it; too few requests decide nothing; the
judged window never reaches back before the canary was deployed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from headrace.models import rollout
from headrace.models.canary import VersionWindow, apply, judge, judged_seconds
from headrace.models.traffic import Canary, CanaryRules, Shadow, TrafficPolicy

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
RULES = CanaryRules(steps=(0.05, 0.25, 0.5), step_s=60, min_requests=20)
HEALTHY = VersionWindow(requests=200, errors=2, p99_ms=80.0, p50_ms=20.0)


def canary(step: int = 0) -> Canary:
    return Canary(version="v2", step=step, step_started_at=T0, rules=RULES)


def test_an_error_rate_past_stable_plus_the_margin_rolls_it_back() -> None:
    failing = VersionWindow(requests=40, errors=8, p99_ms=70.0)
    decision, why = judge(canary(), HEALTHY, failing, T0 + timedelta(seconds=5))
    assert decision == "rollback" and "error rate 20.0%" in why


def test_errors_within_the_margin_are_not_a_rollback() -> None:
    close = VersionWindow(requests=40, errors=2, p99_ms=70.0)  # 5% against 1%: +4 points
    assert judge(canary(), HEALTHY, close, T0 + timedelta(seconds=5))[0] == "hold"


def test_a_p99_past_stable_times_the_ratio_rolls_it_back() -> None:
    slow = VersionWindow(requests=40, errors=0, p99_ms=170.0)
    decision, why = judge(canary(), HEALTHY, slow, T0 + timedelta(seconds=5))
    assert decision == "rollback" and "p99 170 ms" in why


def test_too_few_requests_decide_nothing_even_when_they_all_failed() -> None:
    few = VersionWindow(requests=19, errors=19)
    assert judge(canary(), HEALTHY, few, T0 + timedelta(seconds=600))[0] == "hold"


def test_health_for_step_s_moves_it_up_then_promotes_it_at_the_last_step() -> None:
    ok = VersionWindow(requests=40, errors=0, p99_ms=75.0)
    assert judge(canary(0), HEALTHY, ok, T0 + timedelta(seconds=59))[0] == "hold"
    assert judge(canary(0), HEALTHY, ok, T0 + timedelta(seconds=60))[0] == "step"
    assert judge(canary(2), HEALTHY, ok, T0 + timedelta(seconds=60))[0] == "promote"


def test_apply_moves_promotes_and_rolls_back() -> None:
    policy = TrafficPolicy(stable="v1", canary=canary(0), shadow=Shadow(version="v3"))
    later = T0 + timedelta(seconds=61)
    stepped = apply(policy, "step", later)
    assert stepped.canary is not None and stepped.canary.step == 1
    assert stepped.canary.step_started_at == later and stepped.canary.share == 0.25
    promoted = apply(policy, "promote", later)
    assert (promoted.stable, promoted.previous_stable, promoted.canary) == ("v2", "v1", None)
    assert promoted.shadow == Shadow(version="v3")  # a shadow of another version stays
    rolled = apply(policy, "rollback", later)
    assert rolled.stable == "v1" and rolled.canary is None
    assert apply(policy, "hold", later) == policy


def test_the_judged_window_starts_after_the_second_the_canary_was_deployed() -> None:
    started = canary().model_copy(update={"started_at": T0})
    at = T0.timestamp()
    assert judged_seconds(started, at + 0.9) == 0  # its first second: nothing to judge yet
    assert judged_seconds(started, at + 4.5) == 4
    assert judged_seconds(started, at + 3600) == int(RULES.window_s)
    assert judged_seconds(canary(), at + 4.5) == int(RULES.window_s)  # stored before: whole
    short = VersionWindow(requests=40, errors=8)
    assert "over 4s" in judge(started, HEALTHY, short, T0, window_s=4)[1]


def test_a_deployed_canary_records_when_it_started() -> None:
    deployed = rollout.canary(TrafficPolicy(stable="v1"), "v2", RULES).canary
    assert deployed is not None and deployed.started_at == deployed.step_started_at
