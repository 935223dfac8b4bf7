"""The whole local stack: every service in start order (:func:`services`), the platform's own
processes among them, and starting, stopping and asking after them together.

The worker, learner, beat and API are Python processes of this interpreter that share one
Prometheus multiprocess directory (:func:`metrics_dir`): the first of them to start empties it, the
others keep what the running ones write, so the API's ``/metrics`` sums the workers' counts with
its own.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from factloom.config import Settings
from factloom.metrics import MULTIPROC_ENV, reset_multiprocess_dir
from factloom.platform.monitoring import monitoring_services
from factloom.platform.process import Service, child_tmp, http_ok
from factloom.platform.services.neo4j_server import Neo4jService
from factloom.platform.services.postgres_server import PostgresService
from factloom.platform.services.redis_server import RedisService

__all__ = ["APP_SERVICES", "metrics_dir", "services", "start_all", "start_infra", "start_app", "stop_all", "status"]

# the platform's own processes: they share one metrics directory (metrics_dir)
APP_SERVICES = ("worker", "learner", "beat", "api")


def metrics_dir(settings: Settings) -> Path:
    """The multiprocess directory (``PROMETHEUS_MULTIPROC_DIR``) the worker, learner, beat and API
    processes share, so the API's ``/metrics`` sums the workers' counts with its own."""
    return settings.home / "run" / f"metrics-{settings.api_port}"


class _PythonService(Service):
    def __init__(self, name: str, settings: Settings, args: list[str], match: str,
                 probe: Callable[[], bool] | None = None, ready_marker: str | None = None) -> None:
        super().__init__(name, settings, match=match)
        self.args = args
        self._probe = probe
        self.ready_marker = ready_marker
        self._log_offset = 0

    def command(self) -> list[str]:
        # set before the interpreter starts: prometheus_client reads it once, when first imported
        return [shutil.which("env") or "/usr/bin/env", f"{MULTIPROC_ENV}={metrics_dir(self.settings)}",
                sys.executable, "-m", *self.args]

    def prepare(self) -> None:
        self._log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        shared = metrics_dir(self.settings)
        found = services(self.settings)
        if any(found[name].pid() is not None for name in APP_SERVICES if name != self.name):
            shared.mkdir(parents=True, exist_ok=True)  # the others write there: their files stay
        else:
            reset_multiprocess_dir(shared)  # the first to start: an earlier run's counts go

    def probe(self) -> bool:
        if self._probe is not None:
            return self._probe()
        if self.pid() is None:
            return False
        if self.ready_marker is None or self._proc is None:
            return True  # not started by this object: living is all we can tell
        with open(self.log_file, "rb") as log:
            log.seek(self._log_offset)
            return self.ready_marker.encode() in log.read()


def services(settings: Settings, *, postgres_port: int | None = None) -> dict[str, Service]:
    """Every local service, in start order."""
    api_host = "127.0.0.1" if settings.api_host in ("0.0.0.0", "::") else settings.api_host  # noqa: S104 - recognising a wildcard, not binding one
    health = f"http://{api_host}:{settings.api_port}/healthz"
    celery = ["celery", "-A", "factloom.workers.app"]
    return {
        "redis": RedisService(settings),
        "neo4j": Neo4jService(settings),
        "postgres": PostgresService(settings, port=postgres_port),
        "worker": _PythonService(
            "worker", settings, [*celery, "worker", "-Q", "ingest,check",
                                 "--loglevel", "INFO", "-n", f"factloom-{settings.api_port}@%h"],
            match="celery", ready_marker=" ready."),
        # model updates take minutes: a process of their own, so checks never wait behind one
        "learner": _PythonService(
            "learner", settings, [*celery, "worker", "-Q", "learn", "-c", "1",
                                  "--loglevel", "INFO", "-n", f"factloom-learn-{settings.api_port}@%h"],
            match="celery", ready_marker=" ready."),
        "beat": _PythonService(
            "beat", settings, [*celery, "beat", "--loglevel", "INFO", "--schedule",
                               str(settings.home / "run" / "celerybeat-schedule")],
            match="celery", ready_marker="beat: Starting"),
        # ``factloom api`` execs uvicorn in the same process (the pid file stays right)
        "api": _PythonService("api", settings, ["factloom.platform.cli", "api", "--shared-metrics"], match="uvicorn",
                              probe=lambda: http_ok(health)),
    }


def start_all(settings: Settings, with_postgres: bool = False) -> dict[str, Service]:
    """Start every service (PostgreSQL only on request) and return them by name."""
    started = services(settings)
    if not with_postgres:
        started.pop("postgres")
    for service in started.values():
        service.start()
    return started


def start_infra(settings: Settings) -> None:
    """Redis and Neo4j: what migrations and the app need first."""
    found = services(settings)
    for name in ("redis", "neo4j"):
        found[name].start()


def start_app(settings: Settings) -> None:
    """The worker, learner, beat and API processes."""
    found = services(settings)
    for name in ("worker", "learner", "beat", "api"):
        found[name].start()


def stop_all(settings: Settings) -> None:
    """Stop every service this home has running (Prometheus and Alertmanager first), in reverse start
    order, then clear their temp dir."""
    for service in reversed([*services(settings).values(), *monitoring_services(settings).values()]):
        service.stop()
    shutil.rmtree(child_tmp(settings), ignore_errors=True)


def status(settings: Settings, *, postgres_port: int | None = None) -> dict[str, bool]:
    """Whether each service answers (PostgreSQL on its running port, else ``postgres_port``)."""
    found = services(settings, postgres_port=postgres_port)
    states = {name: service.is_up() for name, service in found.items()}
    # Prometheus and Alertmanager where the settings ask for them, or where they run (up --monitoring)
    watched = {name: service.is_up() for name, service in monitoring_services(settings).items()}
    if settings.monitoring or any(watched.values()):
        states.update(watched)
    return states
