"""`Ticker`: a driver's background thread that does one thing every few seconds until it is
stopped (the engine supervisor's poll, the progress line)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Ticker:
    """Calls ``tick()`` on a daemon thread named ``name`` every ``interval_s`` seconds, until
    `stop` or until ``tick`` returns True."""

    def __init__(self, name: str, interval_s: float, tick: Callable[[], bool | None]) -> None:
        self.name = name
        self.interval_s = interval_s
        self.tick = tick
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        """Stop, waiting at most ``timeout_s`` for a tick under way."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.tick():
                return
