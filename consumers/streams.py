"""Reassembly of a streamed generation: StreamDelta records in ``seq`` order, each once.

Deltas of one request share its key, so they arrive in order; what breaks the order is a
redelivered batch, which streams the same pieces again from ``seq`` 0 (sampling is seeded
from the request id). Those are dropped. The final Reply is authoritative: if pieces are
missing when it comes (a delta lost), the rest of its text is given out then.
"""

from __future__ import annotations

from headrace.schemas.messages import GenerationResult, Reply, StreamDelta


class DeltaAssembler:
    def __init__(self) -> None:
        self.next_seq = 0
        self.text = ""  # what has been given out, in order
        self.duplicates = 0
        self._early: dict[int, str] = {}

    def add(self, delta: StreamDelta) -> list[str]:
        """The pieces now in order (empty while a gap waits to be filled)."""
        if delta.seq < self.next_seq or delta.seq in self._early:
            self.duplicates += 1
            return []
        self._early[delta.seq] = delta.text
        out = []
        while self.next_seq in self._early:
            piece = self._early.pop(self.next_seq)
            self.next_seq += 1
            self.text += piece
            out.append(piece)
        return out

    def finish(self, reply: Reply) -> str:
        """The text the deltas did not give (normally empty) once the final reply is in."""
        if not isinstance(reply.result, GenerationResult):
            return ""
        final = reply.result.text
        rest = final[len(self.text) :] if final.startswith(self.text) else ""
        self.text += rest
        return rest
