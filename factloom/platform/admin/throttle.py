"""Sign-in throttling: after a few failed passwords for one name, that name waits a while.

Kept in the API process's memory, so with N replicas an attacker gets N times the attempts; scrypt
still makes each one cost tens of milliseconds. Keyed by account name rather than client address,
because behind a load balancer every client has the balancer's address.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["LoginThrottle", "THROTTLE"]


class LoginThrottle:
    """At most ``attempts`` failures per name within ``window_s``; then refuse until the oldest expires."""

    def __init__(self, attempts: int = 5, window_s: float = 300.0, clock: Callable[[], float] = time.monotonic,
                 max_names: int = 10_000) -> None:
        self.attempts, self.window_s, self.clock, self.max_names = attempts, window_s, clock, max_names
        self._failures: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> list[float]:
        kept = [t for t in self._failures.get(key, []) if now - t < self.window_s]
        if kept:
            self._failures[key] = kept
        else:
            self._failures.pop(key, None)
        return kept

    def wait_s(self, name: str) -> float:
        """Seconds this name must wait before its next try; 0 when it may try now."""
        key, now = name.strip().casefold(), self.clock()
        with self._lock:
            recent = self._recent(key, now)
            return 0.0 if len(recent) < self.attempts else self.window_s - (now - recent[0])

    def failed(self, name: str) -> None:
        key, now = name.strip().casefold(), self.clock()
        with self._lock:
            if len(self._failures) >= self.max_names and key not in self._failures:
                for old in [k for k in self._failures if not self._recent(k, now)]:
                    self._failures.pop(old, None)
                if len(self._failures) >= self.max_names:
                    return  # a flood of names: stop remembering rather than grow without bound
            self._failures.setdefault(key, []).append(now)

    def succeeded(self, name: str) -> None:
        with self._lock:
            self._failures.pop(name.strip().casefold(), None)


THROTTLE = LoginThrottle()
