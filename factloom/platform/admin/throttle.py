"""Sign-in throttling: after a few failed passwords for one name, that name waits a while.

The failures are kept in Redis (a sorted set of failure times per name, expiring with the window),
so every API replica counts the same attempts; while Redis cannot be reached each process counts in
its own memory instead (:class:`LocalThrottle`), which still bounds an attacker to the attempts of
N replicas, and scrypt still makes each one cost tens of milliseconds. Keyed by account name rather
than client address, because behind a load balancer every client has the balancer's address.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
import time
from collections.abc import Callable

import redis

__all__ = ["LocalThrottle", "LoginThrottle"]

log = logging.getLogger(__name__)


def _key(name: str) -> str:
    return name.strip().casefold()


class LocalThrottle:
    """At most ``attempts`` failures per name within ``window_s``, counted in this process."""

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
        key, now = _key(name), self.clock()
        with self._lock:
            recent = self._recent(key, now)
            return 0.0 if len(recent) < self.attempts else self.window_s - (now - recent[0])

    def failed(self, name: str) -> None:
        key, now = _key(name), self.clock()
        with self._lock:
            if len(self._failures) >= self.max_names and key not in self._failures:
                for old in [k for k in self._failures if not self._recent(k, now)]:
                    self._failures.pop(old, None)
                if len(self._failures) >= self.max_names:
                    return  # a flood of names: stop remembering rather than grow without bound
            self._failures.setdefault(key, []).append(now)

    def succeeded(self, name: str) -> None:
        with self._lock:
            self._failures.pop(_key(name), None)


class LoginThrottle:
    """The same rule shared through Redis by every replica, with :class:`LocalThrottle` as the fallback."""

    PREFIX = "factloom:login-failures:"

    def __init__(self, client: redis.Redis, attempts: int = 5, window_s: float = 300.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.client, self.attempts, self.window_s, self.clock = client, attempts, window_s, clock
        self.local = LocalThrottle(attempts, window_s, clock)
        self._warned = False

    def _redis_key(self, name: str) -> str:
        return self.PREFIX + hashlib.sha256(_key(name).encode()).hexdigest()[:32]

    def _unreachable(self, exc: Exception) -> None:
        if not self._warned:
            log.warning("sign-in failures are counted per process while Redis cannot be reached (%s)", exc)
            self._warned = True

    def wait_s(self, name: str) -> float:
        now = self.clock()
        try:
            key = self._redis_key(name)
            pipe = self.client.pipeline()
            pipe.zremrangebyscore(key, "-inf", now - self.window_s)
            pipe.zcard(key)
            pipe.zrange(key, 0, 0, withscores=True)
            _, count, oldest = pipe.execute()
        except redis.RedisError as exc:
            self._unreachable(exc)
            return self.local.wait_s(name)
        self._warned = False
        if int(count) < self.attempts or not oldest:
            return 0.0
        return max(0.0, self.window_s - (now - float(oldest[0][1])))

    def failed(self, name: str) -> None:
        now = self.clock()
        try:
            key = self._redis_key(name)
            pipe = self.client.pipeline()
            pipe.zadd(key, {f"{now:.6f}:{secrets.token_hex(4)}": now})  # two failures in one instant count twice
            pipe.expire(key, int(self.window_s) + 1)
            pipe.execute()
        except redis.RedisError as exc:
            self._unreachable(exc)
            self.local.failed(name)

    def succeeded(self, name: str) -> None:
        self.local.succeeded(name)
        try:
            self.client.delete(self._redis_key(name))
        except redis.RedisError as exc:
            self._unreachable(exc)
