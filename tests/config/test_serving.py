from __future__ import annotations

import pytest
from pydantic import ValidationError

from headrace.config.settings import Settings


def test_bucket_boundaries_must_increase() -> None:
    assert Settings(buckets=[16, 64]).buckets == [16, 64]
    with pytest.raises(ValidationError, match="strictly increasing"):
        Settings(buckets=[64, 64])


def test_vllm_engine_args_follow_the_settings() -> None:
    args = Settings(
        vllm_max_num_batched_tokens=8192, vllm_priority_scheduling=True
    ).vllm_engine_args()
    assert args["max_num_batched_tokens"] == 8192 and args["scheduling_policy"] == "priority"
    plain = Settings().vllm_engine_args()
    assert "max_num_batched_tokens" not in plain and "scheduling_policy" not in plain
