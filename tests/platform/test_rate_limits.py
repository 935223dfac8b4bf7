"""Rate limits: the Redis token buckets on the test Redis, and the live API's answers (429 with
``Retry-After``) to a wrong-secret flood and to a key over its own limit."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from factloom.config import Settings
from factloom.platform.auth.limits import RETRY_REDIS_S, Bucket, RateLimiter
from factloom.platform.errors import TooManyRequests
from factloom.platform.services import RedisService, services
from tests.services import PORTS

pytestmark = pytest.mark.integration

OFF = Bucket(rate=0.0, burst=0.0)


def unique() -> str:
    return uuid.uuid4().hex[:12]


def test_a_key_gets_its_burst_then_429_until_a_token_refills(redis_service: RedisService, settings: Settings) -> None:
    limiter = RateLimiter(settings.redis_url, per_key=Bucket(rate=2.0, burst=3.0), failures=OFF)
    other = RateLimiter(settings.redis_url, per_key=Bucket(rate=2.0, burst=3.0), failures=OFF)  # another process
    key = unique()

    async def run() -> float:
        for _ in range(2):
            await limiter.charge_key(key)
        await other.charge_key(key)  # the bucket is shared through Redis
        with pytest.raises(TooManyRequests) as refused:
            await limiter.charge_key(key)
        await limiter.charge_key(unique())  # other keys have buckets of their own
        wait = refused.value.retry_after
        assert wait is not None and 0 < wait <= 0.5
        await asyncio.sleep(wait + 0.05)
        await limiter.charge_key(key)  # one token came back
        with pytest.raises(TooManyRequests):
            await other.charge_key(key)
        return wait

    asyncio.run(run())


def test_failures_drain_their_own_bucket_per_address_and_prefix(redis_service: RedisService,
                                                                 settings: Settings) -> None:
    limiter = RateLimiter(settings.redis_url, per_key=OFF, failures=Bucket(rate=3 / 60, burst=3.0))
    prefix = unique()

    async def run() -> None:
        for _ in range(3):
            await limiter.check_failures("10.0.0.1", prefix)  # looking takes nothing
            await limiter.note_failure("10.0.0.1", prefix)
        with pytest.raises(TooManyRequests) as refused:
            await limiter.check_failures("10.0.0.1", prefix)
        assert refused.value.retry_after is not None and 15 < refused.value.retry_after <= 20  # 60 s / 3
        await limiter.check_failures("10.0.0.2", prefix)
        await limiter.check_failures("10.0.0.1", unique())

    asyncio.run(run())


def test_the_limiter_lets_requests_through_when_redis_is_down(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RateLimiter("redis://127.0.0.1:1/0", per_key=Bucket(rate=1.0, burst=1.0),
                          failures=Bucket(rate=1.0, burst=1.0))

    async def run() -> float:
        start = time.perf_counter()
        for _ in range(20):
            await limiter.charge_key("k")
            await limiter.check_failures("10.0.0.1", "p")
            await limiter.note_failure("10.0.0.1", "p")
        return time.perf_counter() - start

    with caplog.at_level(logging.WARNING, logger="factloom.platform.auth.limits"):
        took = asyncio.run(run())
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "rate limits are off" in caplog.records[0].getMessage() and len(caplog.records) == 1
    assert took < 1.0  # one refused connection, then RETRY_REDIS_S without asking Redis
    assert RETRY_REDIS_S >= 1


@contextmanager
def limited_api(settings: Settings, home: Path, **limits: float) -> Iterator[httpx.Client]:
    """A second API process (its own home and port, the session's ledger and Redis) with ``limits``;
    an anonymous client of it."""
    port = PORTS["api"] + 50
    changed = settings.model_copy(update={
        "home": home, "database_url": settings.sql_url, "api_port": port, "api_workers": 1,
        "query_warm_up": False, **limits,
    })
    api = services(changed)["api"]
    api.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            yield client
    finally:
        api.stop()


def test_a_wrong_secret_flood_gets_429_with_retry_after(
    client_with: Callable[[str], httpx.Client], settings: Settings, tmp_path: Path,
) -> None:
    real = client_with("review")
    prefix = real.headers["authorization"].split("_")[1]
    wrong = {"Authorization": f"Bearer fl_{prefix}_not-the-secret"}
    limit = 10
    with limited_api(settings, tmp_path / "home", auth_failure_limit=limit, auth_failure_window_s=60.0) as anonymous:
        assert anonymous.get("/v1/review", headers=dict(real.headers)).status_code == 200
        statuses: list[int] = []
        for _ in range(200):
            response = anonymous.get("/v1/review", headers=wrong)
            statuses.append(response.status_code)
            if response.status_code == 429:
                assert response.headers["content-type"] == "application/problem+json"
                assert int(response.headers["retry-after"]) >= 1
                assert "failed authentications" in response.json()["detail"]
        unauthorized = statuses.count(401)
        # the bucket holds auth_failure_limit failures and refills one every window / limit seconds
        assert limit <= unauthorized <= limit + 1, statuses
        assert statuses.count(429) == 200 - unauthorized and statuses[:unauthorized] == [401] * unauthorized
        # another prefix from the same address is not held back by this one's failures
        other = anonymous.get("/v1/review", headers={"Authorization": f"Bearer fl_{unique()}_x"})
        assert other.status_code == 401


def test_a_key_over_its_rate_limit_gets_429(
    live: object, client_with: Callable[[str], httpx.Client], settings: Settings, tmp_path: Path,
) -> None:
    token = client_with("review").headers["authorization"]
    with limited_api(settings, tmp_path / "home", rate_limit_per_s=1.0, rate_limit_burst=3) as c:
        c.headers["Authorization"] = token
        statuses = [c.get("/v1/review") for _ in range(6)]
        assert [r.status_code for r in statuses[:3]] == [200, 200, 200]
        refused = [r for r in statuses[3:] if r.status_code == 429]
        assert refused, [r.status_code for r in statuses]
        assert int(refused[0].headers["retry-after"]) == 1 and "rate limit is 1 requests/s" in refused[0].text
        time.sleep(1.1)
        assert c.get("/v1/review").status_code == 200


def test_failed_sign_ins_are_counted_across_replicas_and_locally_without_redis(
    redis_service: RedisService, settings: Settings,
) -> None:
    import redis

    from factloom.platform.admin.throttle import LoginThrottle

    now = [1_000_000.0]
    client = redis.Redis.from_url(settings.redis_url)
    one, two = (LoginThrottle(client, attempts=3, window_s=60.0, clock=lambda: now[0]) for _ in range(2))
    name = f"ana-{unique()}"
    one.failed(name)
    two.failed(f" {name.upper()} ")  # another replica, the same name however typed
    assert one.wait_s(name) == 0.0
    one.failed(name)
    assert two.wait_s(name) == pytest.approx(60.0)  # the third failure, seen by every replica
    now[0] += 61.0
    assert one.wait_s(name) == 0.0  # the window passed
    one.failed(name)
    two.succeeded(name)
    assert one.wait_s(name) == 0.0 and client.exists(one._redis_key(name)) == 0
    down = LoginThrottle(redis.Redis(port=9, socket_connect_timeout=0.2), attempts=2, window_s=60.0,
                         clock=lambda: now[0])  # Redis unreachable: this process counts alone
    down.failed(name)
    down.failed(name)
    assert down.wait_s(name) == pytest.approx(60.0)
    client.close()
