"""Shared fixtures. Tests use the real thing: services are started by the run, on test ports.

The test configuration is exported as ``FACTLOOM_*`` when this file is imported, before test
modules are, so any ``get_settings()`` call sees it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from factloom.config import Settings
from factloom.platform.services import Neo4jService, PostgresService, RedisService
from tests.services import PORTS, apply_env, claim_home, make_settings, release_home, running, test_home

SETTINGS = make_settings(test_home())
apply_env(SETTINGS)


# --- service fixtures ---

@pytest.fixture(scope="session")
def settings() -> Iterator[Settings]:
    """The test Settings; taking it claims the test home (lock, leftovers stopped, state wiped)."""
    lock = claim_home(SETTINGS)
    try:
        yield SETTINGS
    finally:
        release_home(SETTINGS, lock)  # stops anything the session left running


@pytest.fixture(scope="session")
def neo4j_service(settings: Settings) -> Iterator[Neo4jService]:
    with running(Neo4jService(settings)) as service:  # fetches the jars first when absent
        yield service


@pytest.fixture(scope="session")
def redis_service(settings: Settings) -> Iterator[RedisService]:
    with running(RedisService(settings)) as service:
        yield service


@pytest.fixture(scope="session")
def postgres_url(settings: Settings) -> Iterator[str]:
    """A running PostgreSQL with an empty ``factloom`` database; its SQLAlchemy URL."""
    service = PostgresService(settings, port=PORTS["postgres"])
    with running(service):
        yield service.url
