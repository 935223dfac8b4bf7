"""The real services a test run starts: test settings, environment and start/stop helpers.

The run uses one home per user (``/tmp/factloom-test-<uid>``, or ``FACTLOOM_TEST_HOME``) on fixed
non-default ports (moved by ``FACTLOOM_TEST_SLOT``), so it never touches a developer's platform.
A lock file keeps two runs from sharing it (the second waits); processes a crashed run left behind
are found by their pid files and stopped, and the state is wiped, before anything starts.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TypeVar

from factloom.config import Settings, get_settings
from factloom.platform.process import Service, child_env
from factloom.platform.services import stop_all

__all__ = [
    "PORTS", "SLOT", "NEO4J_PASSWORD", "default_home", "make_settings", "apply_env", "claim_home",
    "release_home", "running",
]

# FACTLOOM_TEST_SLOT=N (default 0) moves every port up by 100*N and gives the run its own home, so
# runs in separate slots do not wait for each other
SLOT = int(os.environ.get("FACTLOOM_TEST_SLOT") or 0)
PORTS = {name: port + 100 * SLOT for name, port in
         {"neo4j": 17687, "neo4j_http": 17474, "redis": 16379, "postgres": 15432, "api": 18000}.items()}
NEO4J_PASSWORD = "test-password"

S = TypeVar("S", bound=Service)


def default_home() -> Path:
    slot = f"-{SLOT}" if SLOT else ""
    return Path(os.environ.get("FACTLOOM_TEST_HOME") or f"/tmp/factloom-test-{os.getuid()}{slot}")


def make_settings(home: Path) -> Settings:
    return Settings(
        _env_file=None,  # type: ignore[call-arg]  # a developer's .env must not leak into tests
        home=home,
        neo4j_uri=f"bolt://127.0.0.1:{PORTS['neo4j']}",
        neo4j_http_port=PORTS["neo4j_http"],
        neo4j_password=NEO4J_PASSWORD,
        neo4j_heap="512m",
        neo4j_pagecache="256m",
        redis_url=f"redis://127.0.0.1:{PORTS['redis']}/0",
        api_host="127.0.0.1",
        api_port=PORTS["api"],
        database_url="",  # SQLite under home; PostgreSQL tests take the postgres_url fixture
        # the recovery test waits for the sweeper: keep its period short
        sweep_after_s=4.0,
        sweep_every_s=2.0,
        # tests start updates themselves (tests/learn/test_continual.py): none from the beat behind their backs
        learn_min_facts=10**9,
        learn_min_feedback=10**9,
        learn_lock_ttl_s=6.0,
        # the model monitor judges periods of live traffic: tests/learn/test_lifecycle.py runs it with a short
        # period on a beat of its own; the session's beat leaves every other test's versions alone
        monitor_period_s=3600.0,
        # a shadow answers every question the tests ask (it still gives way while others wait)
        shadow_sample=1.0,
        # the suite's many deliberate bad keys (schemathesis among them) come from one address; the
        # failed-authentication limit is tested on an API of its own (tests/platform/test_rate_limits.py)
        auth_failure_limit=0,
    )


def apply_env(settings: Settings) -> None:
    """Make ``get_settings()`` in this process return the test configuration."""
    for key, value in child_env(settings).items():
        if key.startswith("FACTLOOM_"):
            os.environ[key] = value
    get_settings.cache_clear()


def claim_home(settings: Settings, wait_s: float = 900.0) -> IO[str]:
    """Lock the test home, stop leftovers of an earlier run and wipe its state; keep the handle."""
    home = settings.home
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o755)  # the postgres OS user (tests run as root) must reach its data directory
    lock = open(home.parent / f"{home.name}.lock", "w")  # noqa: SIM115 - held for the session
    deadline = time.monotonic() + wait_s
    while True:  # another run on this machine holds the ports: wait for it rather than collide
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                lock.close()
                raise RuntimeError(
                    f"another test run kept {home} (ports {PORTS}) for {wait_s:.0f}s"
                ) from None
            time.sleep(1.0)
    stop_all(settings)
    for child in home.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    return lock


def release_home(settings: Settings, lock: IO[str]) -> None:
    """Stop whatever still runs from the test home, then drop the lock."""
    try:
        stop_all(settings)
    finally:
        lock.close()


@contextmanager
def running(service: S, timeout: float | None = None) -> Iterator[S]:
    service.start(timeout)
    try:
        yield service
    finally:
        service.stop()
