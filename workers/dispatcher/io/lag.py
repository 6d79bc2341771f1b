"""How far a dispatcher's reading lags its bucket topics, for the metrics, the producers'
backlog check and the other dispatchers (once a second, from the shell's housekeeping)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from headrace.limits.store import BucketBacklog, LimitsStore
from headrace.schemas.topics import LANES, Lane
from headrace.transport import Reader
from headrace.workers.dispatcher.core import DispatcherCore
from headrace.workers.dispatcher.events import BacklogSeen
from headrace.workers.dispatcher.io.metrics import LAG, QUEUED_WORK

LAG_KINDS = ("unread", "uncommitted")
Backlog = dict[tuple[str, Lane], int]  # (bucket label, lane) -> records not yet answered


def export_lag(reader: Reader, core: DispatcherCore) -> Backlog:
    """Per bucket: records on its topic not yet read, and not yet committed (before this
    dispatcher's first commit of a partition: not yet read), and the queued work they make.
    Every bucket is set each time, so partitions that went to another dispatcher count there,
    not twice. Returns the backlog: records not read, and read but not answered."""
    lag = {
        (str(b), lane, kind): 0 for b in core.config.buckets for lane in LANES for kind in LAG_KINDS
    }
    backlog: Backlog = {}
    for partition in reader.assignment():
        bucket = core.bucket_of_topic.get(partition[0], "?")
        label = "ingress" if bucket is None else str(bucket)
        lane = core.lane_of_topic.get(partition[0], "online")
        high, position = reader.highwater(partition), reader.position(partition)
        if high is None:
            continue
        unread = max(0, high - position) if position is not None else 0
        committed = core.committed_offset(partition)
        uncommitted = max(0, high - committed) if committed is not None else unread
        lag[label, lane, "unread"] = lag.get((label, lane, "unread"), 0) + unread
        waiting = unread + core.unanswered(partition)
        backlog[label, lane] = backlog.get((label, lane), 0) + waiting
        key = (label, lane, "uncommitted")
        lag[key] = lag.get(key, 0) + uncommitted
    for (label, lane, kind), records in lag.items():
        LAG.labels(label, lane, kind).set(records)
        if kind == "uncommitted" and label.isdigit():
            QUEUED_WORK.labels(label, lane).set(core.queued_work_s(int(label), records))
    return backlog


def publish_backlog(
    limits: LimitsStore,
    dispatcher_id: str,
    core: DispatcherCore,
    backlog: Mapping[tuple[str, Lane], int],
) -> BacklogSeen:
    """Publish this dispatcher's share of each bucket's online backlog; the event tells the
    core the backlog over every live dispatcher."""
    shares = {
        b: BucketBacklog(backlog.get((str(b), "online"), 0), core.drain_s(b))
        for b in core.config.buckets
    }
    totals = limits.publish_backlog(dispatcher_id, shares, time.time())
    return BacklogSeen({b: t.backlog for b, t in totals.items()})
