"""A lone request's latency, leg by leg, beside the broker's two hops timed after it
(``./dev bench`` (e) and (e0); ``bench/pipeline.py`` runs the pipeline around it)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Literal

from rich.table import Table

from bench import broker_floor
from bench.stats import pct
from headrace.config.settings import Settings
from headrace.producers.client import Client
from headrace.schemas.messages import Reply


@dataclass
class LoneLegs:
    overhead_ms: list[float]  # latency - compute
    queued_ms: list[float]
    batch_wait_ms: list[float]
    reply_leg_ms: list[float]  # total - queued - batch_wait - compute
    after_quiet_ms: list[float]  # latency - compute of a request after QUIET_S of silence
    to_worker_ms: list[float] = field(default_factory=list)  # the end of batch_wait
    # the bare client's request hop and reply hop, timed right after each lone request
    request_hop_ms: list[float] = field(default_factory=list)
    reply_hop_ms: list[float] = field(default_factory=list)

    def past_the_dispatcher_ms(self) -> list[float]:
        """Each lone request's batch wait and reply leg less its reply hop: its own part if
        the request leg is all broker (the dispatcher reads a request in about the bare
        client's hop, or less)."""
        return [
            wait + reply - hop
            for wait, reply, hop in zip(
                self.batch_wait_ms, self.reply_leg_ms, self.reply_hop_ms, strict=True
            )
        ]

    def own_ms(self) -> list[float]:
        """Each lone request's latency - compute, less the two hops timed beside it."""
        return [
            overhead - request - reply
            for overhead, request, reply in zip(
                self.overhead_ms, self.request_hop_ms, self.reply_hop_ms, strict=True
            )
        ]


VectorEncoding = Literal["float", "base64"]
QUIET_S = 2.0  # past the fetch-wait grace period (1 s)


def overhead_ms(
    client: Client, text: str, vector_encoding: VectorEncoding = "base64"
) -> tuple[float, Reply]:
    t0 = time.perf_counter()
    reply = client.submit(text, vector_encoding=vector_encoding).result(60)
    total_ms = (time.perf_counter() - t0) * 1000
    assert reply.timings is not None
    return total_ms - reply.timings.compute_ms, reply


def time_lone_requests(
    client: Client,
    texts: list[str],
    settings: Settings,
    lone: int,
    quiet: int,
    vector_encoding: VectorEncoding,
    floor_topics: int | None,
) -> LoneLegs:
    """``lone`` requests one at a time (each timed with the broker's two hops after it when
    ``floor_topics`` is given), then ``quiet`` requests each after ``QUIET_S`` of silence."""
    legs = LoneLegs([], [], [], [], [])
    with contextlib.ExitStack() as hops:
        floor = (
            [hops.enter_context(broker_floor.Hop(settings, n)) for n in (floor_topics, 1)]
            if floor_topics and lone
            else []
        )
        for i in range(lone):
            time.sleep(0.05)  # a lone request: nothing else in flight
            overhead, reply = overhead_ms(client, texts[i % 50], vector_encoding)
            t = reply.timings
            assert t is not None
            legs.overhead_ms.append(overhead)
            legs.queued_ms.append(t.queued_ms)
            legs.batch_wait_ms.append(t.batch_wait_ms)
            if t.to_worker_ms is not None:
                legs.to_worker_ms.append(t.to_worker_ms)
            legs.reply_leg_ms.append(overhead - t.queued_ms - t.batch_wait_ms)
            if floor:
                time.sleep(0.05)
                legs.request_hop_ms.append(floor[0].once())
                time.sleep(0.05)
                legs.reply_hop_ms.append(floor[1].once())
    for i in range(quiet):
        time.sleep(QUIET_S)
        legs.after_quiet_ms.append(overhead_ms(client, texts[i % 50], vector_encoding)[0])
    return legs


def add_lone_rows(table: Table, legs: LoneLegs, request_topics: int) -> None:
    """(e) and (e0) in ``table``: the lone requests' latency, legs and own part."""
    if legs.overhead_ms:
        n = len(legs.overhead_ms)
        table.add_row(
            f"(e) lone request latency - compute, p50 (n={n}) [<= 10 ms]",
            f"{pct(legs.overhead_ms, 0.5):.1f} ms",
        )
        table.add_row(
            "(e) lone request latency - compute, p99", f"{pct(legs.overhead_ms, 0.99):.1f} ms"
        )
        table.add_row(
            "    legs p50: queued / batch wait (its end: to the worker) / reply",
            f"{pct(legs.queued_ms, 0.5):.1f} / {pct(legs.batch_wait_ms, 0.5):.1f} "
            f"({pct(legs.to_worker_ms, 0.5) if legs.to_worker_ms else float('nan'):.1f}) / "
            f"{pct(legs.reply_leg_ms, 0.5):.1f} ms",
        )
    if legs.request_hop_ms:
        hops_p50 = pct(legs.request_hop_ms, 0.5) + pct(legs.reply_hop_ms, 0.5)
        table.add_row(
            f"(e0) the broker alone, one hop p50: request ({request_topics} topics) / "
            "reply (1 topic), timed after each lone request",
            f"{pct(legs.request_hop_ms, 0.5):.1f} / {pct(legs.reply_hop_ms, 0.5):.1f} ms",
        )
        table.add_row(
            "    (e) beyond the two hops (the pipeline's own), p50 of each request's "
            "[target <= 2 ms]",
            f"{pct(legs.own_ms(), 0.5):.1f} ms (p50s subtracted: "
            f"{pct(legs.overhead_ms, 0.5) - hops_p50:.1f})",
        )
        table.add_row(
            "    batch wait + reply leg - its hop (the request leg taken as all broker)",
            f"{pct(legs.past_the_dispatcher_ms(), 0.5):.1f} ms",
        )
    if legs.after_quiet_ms:
        table.add_row(
            f"    after {QUIET_S:.0f} s quiet, p50 (n={len(legs.after_quiet_ms)})",
            f"{pct(legs.after_quiet_ms, 0.5):.1f} ms",
        )
