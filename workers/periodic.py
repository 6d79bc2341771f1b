"""A daemon thread that runs a check every few seconds until stopped: what the dispatcher's
loop watch and the worker's stall watch share."""

from __future__ import annotations

import threading
from typing import Self


class Periodic:
    """Calls ``tick`` every ``every_s`` on a daemon thread named ``name``; a tick that returns
    True ends the thread."""

    def __init__(self, name: str, every_s: float) -> None:
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def tick(self) -> bool:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            if self.tick():
                return
