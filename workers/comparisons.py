"""Shadow comparisons in Redis: the served version and the shadow version each write their
result for a shadowed request; whichever writes second compares the two and adds to the
shadow version's figures: embeddings by cosine, generations by exact match and length.
Neither result ever reaches the requester from here.

Per request, a hash of its two sides (ten minutes: a side whose partner never comes
expires); per (served, shadow) pair, running totals and the last 1,000 cosines (for a low
percentile).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis

from headrace.schemas.messages import EmbeddingResult, GenerationResult, Reply

PAIR_TTL_S = 600
RECENT = 1000

# Set this side's field; return the other side's (nil while it has not come).
_SET_AND_GET = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return redis.call('HGET', KEYS[1], ARGV[3])
"""


@dataclass(frozen=True)
class Side:
    version: str
    ok: bool
    vector: list[float] | None = None
    text: str | None = None
    tokens: int = 0

    @classmethod
    def of(cls, version: str, reply: Reply) -> Side:
        result = reply.result
        if isinstance(result, EmbeddingResult):
            return cls(version, True, vector=result.vector())
        if isinstance(result, GenerationResult):
            return cls(version, True, text=result.text, tokens=result.usage.completion_tokens)
        return cls(version, False)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


class Comparisons:
    def __init__(self, client: redis.Redis, prefix: str, model: str) -> None:
        self.redis = client
        self.prefix = f"{prefix}:cmp:{model}"
        self._set_and_get = client.register_script(_SET_AND_GET)

    def _pair(self, tenant: str, request_id: str) -> str:
        return f"{self.prefix}:req:{tenant}:{request_id}"

    def _totals(self, served: str, shadow: str) -> str:
        return f"{self.prefix}:totals:{served}:{shadow}"

    def _recent(self, served: str, shadow: str) -> str:
        return f"{self.prefix}:cosines:{served}:{shadow}"

    def record(self, tenant: str, request_id: str, role: str, side: Side, other: str) -> bool:
        """Write this side (``role``: served or shadow) of a request; compare when the other
        (version ``other``) is there already. True when it compared."""
        other_role = "shadow" if role == "served" else "served"
        raw = self._set_and_get(
            keys=[self._pair(tenant, request_id)],
            args=[role, json.dumps(side.__dict__), other_role, PAIR_TTL_S],
        )
        if raw is None:
            return False
        partner = Side(**json.loads(raw))
        served, shadow = (side, partner) if role == "served" else (partner, side)
        self._compare(served, shadow)
        self.redis.delete(self._pair(tenant, request_id))
        return True

    def _compare(self, served: Side, shadow: Side) -> None:
        totals = self._totals(served.version, shadow.version)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hincrby(totals, "compared", 1)
        if not shadow.ok:
            pipe.hincrby(totals, "shadow_errors", 1)
        elif not served.ok:
            pipe.hincrby(totals, "served_errors", 1)
        elif served.vector is not None and shadow.vector is not None:
            c = cosine(served.vector, shadow.vector)
            pipe.hincrbyfloat(totals, "cosine_sum", c)
            pipe.hincrby(totals, "cosines", 1)
            pipe.lpush(self._recent(served.version, shadow.version), f"{c:.6f}")
            pipe.ltrim(self._recent(served.version, shadow.version), 0, RECENT - 1)
        else:
            pipe.hincrby(totals, "generations", 1)
            pipe.hincrby(totals, "exact", int(served.text == shadow.text))
            pipe.hincrby(totals, "length_diff_sum", abs(served.tokens - shadow.tokens))
        pipe.execute()

    def summary(self, served: str, shadow: str) -> dict[str, Any]:
        """What the comparisons of ``shadow`` against ``served`` found so far."""
        raw = cast(dict[bytes, bytes], self.redis.hgetall(self._totals(served, shadow)))
        totals = {k.decode(): float(v) for k, v in raw.items()}
        recent = sorted(
            float(c)
            for c in cast(list[bytes], self.redis.lrange(self._recent(served, shadow), 0, -1))
        )
        out: dict[str, Any] = {
            "compared": int(totals.get("compared", 0)),
            "shadow_errors": int(totals.get("shadow_errors", 0)),
            "served_errors": int(totals.get("served_errors", 0)),
        }
        if totals.get("cosines"):
            out["mean_cosine"] = totals["cosine_sum"] / totals["cosines"]
            out["p5_cosine"] = recent[int(0.05 * (len(recent) - 1))] if recent else None
            out["min_cosine"] = recent[0] if recent else None
        if totals.get("generations"):
            out["exact_match"] = totals["exact"] / totals["generations"]
            out["mean_length_diff"] = totals["length_diff_sum"] / totals["generations"]
        return out
