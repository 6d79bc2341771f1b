from __future__ import annotations

from typing import get_args

from headrace.config.faults import DegradeRung
from headrace.config.settings import Settings


def test_a_bucket_s_backlog_bound_is_its_own_else_the_default() -> None:
    settings = Settings(max_backlog=100, bucket_max_backlog={64: 7, 128: 0})
    assert settings.backlog_bound(64) == 7
    assert settings.backlog_bound(32) == 100
    assert settings.backlog_bound(128) is None  # 0: unbounded
    assert Settings(max_backlog=0).backlog_bound(32) is None


def test_the_ladder_climbs_every_rung_by_default() -> None:
    assert Settings().degrade_rungs == list(get_args(DegradeRung))
