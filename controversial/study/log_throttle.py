"""Bounded logging of events a client can repeat at will (a refused answer, sent 349 times a second by one
session, once wrote 349 WARNING lines a second): at most one line per key per interval, and at most
``max_lines`` lines per interval in all; what is held back is counted and reported with the next line.

The database keeps the exact counts (``n_refused``); the log only has to say that it happened, and how often,
without letting one client fill the disk or bury every other line.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class LogThrottle:
    """Decides whether an event for ``key`` gets a log line now, and how many events that line stands for."""

    def __init__(
        self,
        interval_s: float = 60.0,
        max_lines: int = 60,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s, self.max_lines, self.max_keys, self.clock = interval_s, max_lines, max_keys, clock
        self.keys: dict[object, tuple[float, int]] = {}  # key -> (when its last line was written, events held back)
        self.window = (float("-inf"), 0)  # (start of the current interval, lines written in it)
        self.lock = threading.Lock()

    def due(self, key: object) -> int:
        """Count one event for ``key``; the number of events a line written now should report (this one and
        those held back since the key's last line), or 0 when no line is due."""
        now = self.clock()
        with self.lock:
            last, held = self.keys.get(key, (float("-inf"), 0))
            start, lines = self.window
            if now - start >= self.interval_s:
                start, lines = now, 0
            if now - last < self.interval_s or lines >= self.max_lines:
                self.keys[key] = (last, held + 1)
                self.window = (start, lines)
                return 0
            self.keys[key] = (now, 0)
            self.window = (start, lines + 1)
            if len(self.keys) > self.max_keys:  # forget keys with nothing held back and no line this interval
                for old in [k for k, (t, h) in self.keys.items() if not h and now - t >= self.interval_s]:
                    del self.keys[old]
            return held + 1
