"""Rate limits under ``/v1``: a token bucket per API key, and one per client address and key prefix
that only failed authentications drain.

A bucket holds up to ``burst`` tokens and refills at ``rate`` tokens a second; a request takes one,
and one that finds less than a token waits ``(1 - tokens) / rate`` seconds, which the 429 sends as
``Retry-After`` (the token bucket of Turner, "New directions in communications", IEEE Comm. Mag. 1986;
https://en.wikipedia.org/wiki/Token_bucket). The failure bucket holds ``auth_failure_limit`` tokens
refilled over ``auth_failure_window_s``: ten wrong secrets a minute, say, then one every six seconds,
so guessing the secret of a known prefix runs at a crawl while a person who mistyped waits seconds.
It is looked at before a key is verified and drained only when verification fails; a valid key that
the process has just verified is served from the key cache and never looks at it.

The bucket lives in Redis, so every API process shares it, and one Lua script reads, refills and
takes atomically (Redis runs a script alone) on Redis's clock (``TIME``), so the processes need not
agree on theirs. The script runs on an asyncio Redis client of the limiter's own, not on the
process's synchronous one (``Resources.redis``): the check runs in the async auth dependency, where a
blocking call would stall the event loop and a thread-pool hop per request would cost what
``deps.py`` avoids; so it is one round trip on the event loop.

When Redis cannot be reached the limiter fails open: availability over limiting. It logs once per
outage and does not try Redis again for :data:`RETRY_REDIS_S` seconds, so a Redis that hangs does
not slow every request by a socket timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from factloom.config import Settings
from factloom.platform.errors import TooManyRequests

__all__ = ["Bucket", "RateLimiter", "limiter", "RETRY_REDIS_S"]

log = logging.getLogger(__name__)

# after Redis failed, how long the limiter lets everything through before it asks Redis again
RETRY_REDIS_S = 5.0
# a Redis that does not answer within this long counts as down (the request goes on unlimited)
REDIS_TIMEOUT_S = 0.5
# a key prefix is the client's text: only this much of it names a failure bucket
MAX_PREFIX_CHARS = 32
NAMESPACE = "factloom:ratelimit"

# KEYS[1] the bucket; ARGV rate (tokens/s), burst (tokens), cost (tokens to take; 0 only looks).
# Returns {1, "0"} when there was a token (and takes ``cost``), else {0, seconds until there is one};
# the wait is a string because Redis turns Lua numbers into integers.
TOKEN_BUCKET = """
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local held = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(held[1]) or burst
local at = tonumber(held[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
if tokens < 1 then
  return {0, tostring((1 - tokens) / rate)}
end
tokens = tokens - cost
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {1, '0'}
"""  # noqa: S105 - a Lua script, not a password


@dataclass(frozen=True, slots=True)
class Bucket:
    """``rate`` tokens a second up to ``burst``; a rate of 0 turns the bucket off."""

    rate: float
    burst: float

    @property
    def on(self) -> bool:
        return self.rate > 0 and self.burst > 0


@dataclass
class RateLimiter:
    """The two limits of one API process, on the Redis at ``url``."""

    url: str
    per_key: Bucket
    failures: Bucket
    _client: Any = field(default=None, repr=False)
    _script: Any = field(default=None, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _down_until: float = field(default=0.0, repr=False)

    async def charge_key(self, key_id: str) -> None:
        """Take one request from the key's bucket; :class:`TooManyRequests` when it is empty."""
        if not self.per_key.on:
            return
        wait = await self._take(f"{NAMESPACE}:key:{key_id}", self.per_key, cost=1)
        if wait is not None:
            raise TooManyRequests(
                f"this key's rate limit is {self.per_key.rate:g} requests/s (bursts of {self.per_key.burst:g})",
                retry_after=wait)

    async def check_failures(self, address: str, prefix: str) -> None:
        """Refuse to verify a key for ``address`` while its failures on ``prefix`` used up their bucket."""
        if not self.failures.on:
            return
        wait = await self._take(self._failure_key(address, prefix), self.failures, cost=0)
        if wait is not None:
            raise TooManyRequests("too many failed authentications from this address for this key; "
                                  "check the key and try later", retry_after=wait)

    async def note_failure(self, address: str, prefix: str) -> None:
        """Count one failed authentication of ``prefix`` from ``address``."""
        if self.failures.on:
            await self._take(self._failure_key(address, prefix), self.failures, cost=1)

    @staticmethod
    def _failure_key(address: str, prefix: str) -> str:
        return f"{NAMESPACE}:authfail:{address}:{prefix[:MAX_PREFIX_CHARS]}"

    async def _take(self, key: str, bucket: Bucket, cost: int) -> float | None:
        """Seconds to wait when ``key``'s bucket holds no token, else ``None`` (and ``cost`` is taken);
        ``None`` too while Redis cannot be reached."""
        if time.monotonic() < self._down_until:
            return None
        try:
            allowed, wait = await self._bucket_script()(keys=[key], args=[bucket.rate, bucket.burst, cost])
        except (RedisError, OSError) as exc:
            if not self._down_until:
                log.warning("rate limits are off while Redis at %s cannot be reached (%s); retrying every %.0f s",
                            self._where(), type(exc).__name__, RETRY_REDIS_S)
            self._down_until = time.monotonic() + RETRY_REDIS_S
            return None
        if self._down_until:
            log.info("rate limits are on again: Redis answers")
            self._down_until = 0.0
        return None if int(allowed) else float(wait)

    def _bucket_script(self) -> Any:
        # an asyncio connection belongs to the event loop that opened it: one client per loop (the
        # API has one; tests that call asyncio.run more than once get one each)
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = aioredis.Redis.from_url(self.url, socket_timeout=REDIS_TIMEOUT_S,
                                                   socket_connect_timeout=REDIS_TIMEOUT_S)
            self._script = self._client.register_script(TOKEN_BUCKET)
            self._loop = loop
        return self._script

    def _where(self) -> str:
        # the URL without its password, for the log
        return self.url.rsplit("@", 1)[-1]


_limiters: dict[tuple[str, float, float, float, float], RateLimiter] = {}


def limiter(settings: Settings) -> RateLimiter:
    """The process's limiter for ``settings`` (one per Redis URL and limits, made on first use)."""
    failures = Bucket(rate=settings.auth_failure_limit / settings.auth_failure_window_s
                      if settings.auth_failure_window_s > 0 else 0.0,
                      burst=float(settings.auth_failure_limit))
    per_key = Bucket(rate=settings.rate_limit_per_s, burst=float(max(settings.rate_limit_burst, 1)))
    which = (settings.redis_url, per_key.rate, per_key.burst, failures.rate, failures.burst)
    found = _limiters.get(which)
    if found is None:
        found = _limiters[which] = RateLimiter(settings.redis_url, per_key=per_key, failures=failures)
    return found
