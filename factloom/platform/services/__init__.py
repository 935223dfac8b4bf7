"""The local platform without Docker: Neo4j, Redis, PostgreSQL, the API, workers (checks, learning) and beat.

Each is a :class:`~factloom.platform.process.Service` (pid file, log, readiness probe, idempotent
start, signal-then-kill stop):

- :mod:`.neo4j_server`: Neo4j from the jars Maven Central publishes, its password set on first start;
- :mod:`.redis_server`: Redis from the OS package;
- :mod:`.postgres_server`: a throw-away PostgreSQL cluster, for the tests;
- :mod:`.stack`: the platform's own processes, and the whole stack started, stopped and asked after
  in order.
"""

from __future__ import annotations

from factloom.platform.services.neo4j_server import Neo4jService, ensure_neo4j, neo4j_lib_dir
from factloom.platform.services.postgres_server import PostgresService
from factloom.platform.services.redis_server import RedisService
from factloom.platform.services.stack import (
    APP_SERVICES,
    metrics_dir,
    services,
    start_all,
    start_app,
    start_infra,
    status,
    stop_all,
)

__all__ = [
    "Neo4jService", "RedisService", "PostgresService", "neo4j_lib_dir", "ensure_neo4j",
    "services", "start_all", "start_infra", "start_app", "stop_all", "status", "metrics_dir", "APP_SERVICES",
]
