"""Attempts counted in a sliding window, per key, in this process: at most ``limit`` in any
``window`` seconds. Memory is bounded whatever the keys: at most ``max_keys`` are tracked,
each with at most ``limit`` times, and the least recently seen key is forgotten first (a flood
of distinct clients or tokens costs the flood its own counts, never unbounded memory).

Sign-in uses two (per client address and per token: costsvc/pages/session.py,
docs/security.md)."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

MAX_KEYS = 10_000


class SlidingWindow:
    """At most ``limit`` attempts per key in any ``window`` seconds."""

    def __init__(
        self,
        limit: int,
        window: float = 60.0,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.window, self.max_keys, self.clock = limit, window, max_keys, clock
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def wait(self, key: str, now: float) -> float:
        """Seconds until ``key`` may try again (0: now); :func:`attempt` holds the lock."""
        times = self._seen.get(key)
        if times is None:
            return 0.0
        while times and times[0] <= now - self.window:
            times.popleft()
        if len(times) < self.limit:
            return 0.0
        return times[0] + self.window - now

    def note(self, key: str, now: float) -> None:
        """Count an attempt of ``key``; :func:`attempt` holds the lock."""
        times = self._seen.pop(key, None) or deque(maxlen=self.limit)
        times.append(now)
        self._seen[key] = times  # the most recently seen last
        while len(self._seen) > self.max_keys:
            self._seen.popitem(last=False)


_LOCK = threading.Lock()  # one attempt checks and counts several windows together


def attempt(pairs: list[tuple[SlidingWindow, str]]) -> int:
    """Count one attempt under every (window, key) of ``pairs`` when each allows it, and
    answer 0; else count nothing and answer the whole seconds to wait (``Retry-After``)."""
    if not pairs:
        return 0
    with _LOCK:
        now = pairs[0][0].clock()
        wait = max(w.wait(key, now) for w, key in pairs)
        if wait > 0:
            return max(1, math.ceil(wait))
        for w, key in pairs:
            w.note(key, now)
        return 0
