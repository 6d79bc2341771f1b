"""The arithmetic of `headrace top`, on scrapes written by hand: rates and ratios over the
interval, lag summed over dispatchers, latency quantiles from histogram buckets (as
Prometheus' histogram_quantile), counter resets, and each worker's state."""

from __future__ import annotations

import math

import pytest

from headrace.ops.top_view import Scrape, buckets_view, quantile, workers_view


def dispatcher(
    url: str, at: float, batches: int, rows: int, real: int, padded: int, lag: int
) -> Scrape:
    text = f"""
# TYPE headrace_dispatcher_batch_rows histogram
headrace_dispatcher_batch_rows_bucket{{bucket="16",le="+Inf"}} {batches}
headrace_dispatcher_batch_rows_count{{bucket="16"}} {batches}
headrace_dispatcher_batch_rows_sum{{bucket="16"}} {rows}
# TYPE headrace_dispatcher_real_tokens counter
headrace_dispatcher_real_tokens_total{{bucket="16"}} {real}
# TYPE headrace_dispatcher_padded_tokens counter
headrace_dispatcher_padded_tokens_total{{bucket="16"}} {padded}
# TYPE headrace_dispatcher_lag_records gauge
headrace_dispatcher_lag_records{{bucket="16",kind="unread",lane="online"}} {lag}
headrace_dispatcher_lag_records{{bucket="16",kind="uncommitted",lane="online"}} {lag * 2}
headrace_dispatcher_lag_records{{bucket="16",kind="unread",lane="bulk"}} 1
# TYPE headrace_dispatcher_queued_work_seconds gauge
headrace_dispatcher_queued_work_seconds{{bucket="16"}} {lag * 0.01}
"""
    return Scrape.parse(url, at, text, ready=True)


def worker(url: str, at: float, replies: int, under_50ms: int, ready: bool = True) -> Scrape:
    text = f"""
# TYPE headrace_worker_info gauge
headrace_worker_info{{buckets="16,32",device="cpu",model="m",worker_id="w-{url[-1]}"}} 1.0
# TYPE headrace_worker_replies counter
headrace_worker_replies_total{{bucket="16",outcome="ok"}} {replies}
# TYPE headrace_worker_batches counter
headrace_worker_batches_total{{bucket="16"}} {replies // 4}
# TYPE headrace_request_seconds histogram
headrace_request_seconds_bucket{{bucket="16",le="0.05"}} {under_50ms}
headrace_request_seconds_bucket{{bucket="16",le="0.1"}} {replies}
headrace_request_seconds_bucket{{bucket="16",le="+Inf"}} {replies}
headrace_request_seconds_count{{bucket="16"}} {replies}
headrace_request_seconds_sum{{bucket="16"}} 1.0
# TYPE headrace_worker_memory_bytes gauge
headrace_worker_memory_bytes{{kind="rss"}} 104857600
# TYPE headrace_worker_memory_used_ratio gauge
headrace_worker_memory_used_ratio 0.25
"""
    return Scrape.parse(url, at, text, ready=ready)


def test_quantiles_interpolate_within_a_bucket_like_prometheus() -> None:
    cumulative = {0.1: 50.0, 0.2: 100.0, math.inf: 100.0}
    assert quantile(0.5, cumulative) == pytest.approx(0.1)
    assert quantile(0.75, cumulative) == pytest.approx(0.15)
    assert quantile(0.99, cumulative) == pytest.approx(0.198)
    assert quantile(0.99, {0.1: 0.0, math.inf: 10.0}) == pytest.approx(0.1)  # past the last
    assert quantile(0.5, {0.1: 0.0, math.inf: 0.0}) is None


def test_per_bucket_figures_over_the_interval_summed_over_processes() -> None:
    before = [
        dispatcher("http://d1", 0.0, batches=10, rows=40, real=300, padded=400, lag=5),
        dispatcher("http://d2", 0.0, batches=0, rows=0, real=0, padded=0, lag=0),
        worker("http://w1", 0.0, replies=40, under_50ms=40),
    ]
    after = [
        dispatcher("http://d1", 2.0, batches=20, rows=120, real=900, padded=1000, lag=7),
        dispatcher("http://d2", 2.0, batches=10, rows=40, real=350, padded=500, lag=3),
        worker("http://w1", 2.0, replies=160, under_50ms=100),
    ]
    [row] = buckets_view(after, {s.url: s for s in before}, [16])
    assert (row.unread, row.unanswered) == (12, 20)  # both lanes, both dispatchers
    assert row.queued_work_s == pytest.approx(0.10)
    assert row.rate_per_s == pytest.approx(60.0)  # 120 replies in 2 s
    assert row.rows_per_batch == pytest.approx(6.0)  # 120 rows / 20 batches
    assert row.padding == pytest.approx(950 / 1100)
    # this interval: 60 of 120 replies under 50 ms, the rest under 100 ms
    assert row.p50_s == pytest.approx(0.05)
    assert row.p99_s == pytest.approx(0.05 + 0.05 * (118.8 - 60) / 60)


def test_a_restarted_process_counts_from_zero_and_a_first_scrape_has_no_rates() -> None:
    before = {"http://w1": worker("http://w1", 0.0, replies=500, under_50ms=500)}
    [row] = buckets_view([worker("http://w1", 1.0, replies=8, under_50ms=8)], before, [16])
    assert row.rate_per_s == pytest.approx(8.0)
    [first] = buckets_view([worker("http://w1", 1.0, replies=8, under_50ms=8)], {}, [16])
    assert first.rate_per_s == 0.0 and first.rows_per_batch is None and first.padding is None


def test_each_worker_with_its_state_memory_and_batch_rate() -> None:
    before = {"http://w1": worker("http://w1", 0.0, replies=0, under_50ms=0)}
    now = [
        worker("http://w1", 2.0, replies=40, under_50ms=40),
        worker("http://w2", 2.0, replies=0, under_50ms=0, ready=False),
        Scrape("http://w3", 2.0, ok=False),
        dispatcher("http://d1", 2.0, 0, 0, 0, 0, 0),
    ]
    rows = {w.url: w for w in workers_view(now, before)}
    assert set(rows) == {"http://w1", "http://w2", "http://w3"}  # the dispatcher is no worker
    w1 = rows["http://w1"]
    assert (w1.state, w1.worker_id, w1.model, w1.buckets) == ("ready", "w-1", "m", "16,32")
    assert w1.memory_bytes == 104857600 and w1.memory_share == pytest.approx(0.25)
    assert w1.batches_per_s == pytest.approx(5.0)
    assert rows["http://w2"].state == "loading" and rows["http://w3"].state == "down"
