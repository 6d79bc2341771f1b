from __future__ import annotations

import pytest

from headrace.schemas.buckets import DEFAULT_BUCKETS, bucket_for, validate_boundaries
from headrace.schemas.topics import Topics


@pytest.mark.parametrize(
    ("tokens", "bucket"), [(0, 16), (1, 16), (16, 16), (17, 24), (129, 192), (512, 512)]
)
def test_smallest_bucket_that_fits(tokens: int, bucket: int) -> None:
    assert bucket_for(tokens, DEFAULT_BUCKETS) == bucket


def test_past_the_last_bucket_is_an_error() -> None:
    with pytest.raises(ValueError, match="largest bucket"):
        bucket_for(513, DEFAULT_BUCKETS)


@pytest.mark.parametrize("bad", [[], [0, 8], [32, 16], [16, 16]])
def test_boundaries_must_be_positive_and_increasing(bad: list[int]) -> None:
    with pytest.raises(ValueError):
        validate_boundaries(bad)


def test_topic_names_round_trip() -> None:
    topics = Topics("acme")
    assert topics.requests(64) == "acme.requests.b64"
    assert topics.bucket_of("acme.requests.b64") == 64
    assert topics.queue(64) == "acme.b64"
    assert topics.dead_letter == "acme.dead-letter"
    assert topics.ingress == "acme.requests"  # the unbucketed way in
    with pytest.raises(ValueError):
        topics.bucket_of("other.requests.b64")
