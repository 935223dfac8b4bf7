"""The local platform without Docker: Neo4j, Redis, PostgreSQL, the API, workers (checks, learning) and beat.

Each is a :class:`~factloom.platform.process.Service` (pid file, log, readiness probe, idempotent
start, signal-then-kill stop). Neo4j runs from the jars Maven Central publishes (it has no community
standalone archive): the server module and its dependencies, copied by ``mvn
dependency:copy-dependencies`` with ``deploy/neo4j/pom.xml`` into the shared cache, started with
the entry point the packaged ``bin/neo4j`` uses; the configured (or generated) password replaces the
initial ``neo4j/neo4j`` on first start. PostgreSQL is for the tests; as root it runs as the
``postgres`` OS user, since it refuses to run as root.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from factloom.config import NEO4J_VERSION, Settings
from factloom.metrics import MULTIPROC_ENV, reset_multiprocess_dir
from factloom.platform.monitoring import monitoring_services
from factloom.platform.process import (
    Service,
    ServiceError,
    child_env,
    child_tmp,
    host_port,
    http_ok,
    tail,
    wait_http,
)

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "ServiceError", "Service", "Neo4jService", "RedisService", "PostgresService",
    "neo4j_lib_dir", "ensure_neo4j", "child_env", "http_ok", "wait_http",
    "services", "start_all", "start_infra", "start_app", "stop_all", "status", "metrics_dir", "APP_SERVICES",
]

POM = Path(__file__).resolve().parents[2] / "deploy" / "neo4j" / "pom.xml"
PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
# JVM flags from the server.jvm.additional defaults of the packaged neo4j.conf
NEO4J_JVM_FLAGS = [
    "-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow", "-XX:+DisableExplicitGC",
    "-Djdk.nio.maxCachedBufferSize=1024", "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dlog4j2.disable.jmx=true", "-Djdk.tls.ephemeralDHKeySize=2048",
    "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED",
]


# --- Neo4j jars -----------------------------------------------------------------------------------

def neo4j_lib_dir(settings: Settings) -> Path:
    return settings.cache_dir / "neo4j" / NEO4J_VERSION / "lib"


def ensure_neo4j(settings: Settings) -> Path:
    """Fetch the Neo4j server jars from Maven Central unless they are in the cache already."""
    lib = neo4j_lib_dir(settings)
    if any(lib.glob("neo4j-server-*.jar")):
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceError("Maven (mvn) is needed to fetch Neo4j; run scripts/setup.sh")
    lib.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="lib.tmp.", dir=lib.parent))
    try:
        proc = subprocess.run(  # noqa: S603 - Maven with our own pom
            [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM),
             f"-Dneo4j.version={NEO4J_VERSION}", "dependency:copy-dependencies",
             f"-DoutputDirectory={tmp}"],
            capture_output=True, text=True, check=False,
        )
        if proc.returncode != 0:
            out = (proc.stdout + proc.stderr)[-4000:]
            raise ServiceError(f"mvn could not fetch Neo4j {NEO4J_VERSION}:\n{out}")
        shutil.rmtree(lib, ignore_errors=True)
        tmp.rename(lib)  # same directory: atomic, so a half-copied lib is never seen
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return lib


# --- services -------------------------------------------------------------------------------------
class Neo4jService(Service):
    start_timeout = 180.0
    stop_timeout = 60.0

    def __init__(self, settings: Settings) -> None:
        super().__init__("neo4j", settings, match="org.neo4j.server.CommunityEntryPoint")
        self.neo4j_home = settings.home / "neo4j"
        self.host, self.port = host_port(settings.neo4j_uri, 7687)

    def prepare(self) -> None:
        for sub in ("conf", "data", "logs", "run", "import", "plugins"):
            (self.neo4j_home / sub).mkdir(parents=True, exist_ok=True)
        h = self.neo4j_home
        s = self.settings
        conf = {
            "server.default_listen_address": self.host,
            "server.bolt.listen_address": f"{self.host}:{self.port}",
            "server.http.enabled": "true",
            "server.http.listen_address": f"{self.host}:{s.neo4j_http_port}",
            "server.https.enabled": "false",
            "server.directories.data": h / "data",
            "server.directories.logs": h / "logs",
            "server.directories.run": h / "run",
            "server.directories.import": h / "import",
            "server.directories.plugins": h / "plugins",
            "server.memory.heap.initial_size": s.neo4j_heap,
            "server.memory.heap.max_size": s.neo4j_heap,
            "server.memory.pagecache.size": s.neo4j_pagecache,
            "dbms.security.auth_enabled": "true",
            "dbms.usage_report.enabled": "false",
        }
        (h / "conf" / "neo4j.conf").write_text("".join(f"{k}={v}\n" for k, v in conf.items()))

    def command(self) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise ServiceError("neo4j: java is not installed; run scripts/setup.sh")
        lib = ensure_neo4j(self.settings)
        heap = self.settings.neo4j_heap
        return [
            java, f"-Xms{heap}", f"-Xmx{heap}", *NEO4J_JVM_FLAGS, "-cp", f"{lib}/*",
            "org.neo4j.server.CommunityEntryPoint",
            f"--home-dir={self.neo4j_home}", f"--config-dir={self.neo4j_home / 'conf'}",
        ]

    def log_tail(self, lines: int = 40) -> str:
        own = tail(self.neo4j_home / "logs" / "neo4j.log", lines)
        return f"{super().log_tail(lines)}\n--- {self.neo4j_home / 'logs' / 'neo4j.log'}:\n{own}"

    def _query(self, auth: tuple[str, str], database: str | None = None, cypher: str = "RETURN 1",
               **params: str) -> None:
        from neo4j import GraphDatabase

        with GraphDatabase.driver(f"bolt://{self.host}:{self.port}", auth=auth,
                                  connection_timeout=3.0, max_connection_lifetime=30) as driver:
            with driver.session(database=database) as session:
                session.run(cypher, params).consume()

    def probe(self) -> bool:
        from neo4j.exceptions import DriverError, Neo4jError

        try:
            self._query(self.settings.neo4j_auth())
            return True
        except (Neo4jError, DriverError, OSError):
            return False

    def ready(self) -> bool:
        return self._bolt_open()  # the password may still be the initial one: probe() would fail

    def after_start(self, deadline: float) -> None:
        self._set_password(deadline)
        if not self.probe():
            raise self._fail("Bolt is open but RETURN 1 fails with the configured password")

    def _bolt_open(self) -> bool:
        import socket

        try:
            with socket.create_connection((self.host, self.port), timeout=1.0):
                return True
        except OSError:
            return False

    def _set_password(self, deadline: float) -> None:
        """Replace the initial neo4j/neo4j with the configured password (first start only)."""
        from neo4j.exceptions import AuthError, ClientError, DriverError, Neo4jError

        user, password = self.settings.neo4j_auth()
        while True:
            try:
                self._query((user, password))
                return
            except AuthError:
                pass
            except ClientError as exc:  # credentials expired: someone else's half-done first start
                if "CredentialsExpired" not in (exc.code or ""):
                    raise self._fail(f"Bolt query failed: {exc}") from exc
            except (DriverError, Neo4jError, OSError):
                if time.monotonic() > deadline:
                    raise self._fail("Bolt did not answer") from None
                time.sleep(0.5)
                continue
            try:
                self._query((user, "neo4j"), "system",
                            "ALTER CURRENT USER SET PASSWORD FROM 'neo4j' TO $pw", pw=password)
                return
            except AuthError as exc:
                raise self._fail(
                    "Neo4j rejects both the configured password and the initial one; the data "
                    "under "
                    f"{self.neo4j_home} was created with another password"
                ) from exc
            except (DriverError, Neo4jError, OSError):
                if time.monotonic() > deadline:
                    raise self._fail("could not set the Neo4j password") from None
                time.sleep(0.5)


class RedisService(Service):
    def __init__(self, settings: Settings) -> None:
        super().__init__("redis", settings, match="redis-server")
        self.host, self.port = host_port(settings.redis_url, 6379)

    def command(self) -> list[str]:
        exe = shutil.which("redis-server")
        if exe is None:
            raise ServiceError("redis: redis-server is not installed; run scripts/setup.sh")
        data = self.settings.home / "redis"
        data.mkdir(parents=True, exist_ok=True)
        return [exe, "--port", str(self.port), "--bind", self.host, "--dir", str(data),
                "--save", "", "--appendonly", "yes", "--daemonize", "no"]

    def probe(self) -> bool:
        import redis

        try:
            client = redis.Redis(host=self.host, port=self.port, socket_timeout=1.0,
                                 socket_connect_timeout=1.0)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except (redis.RedisError, OSError):
            return False


class PostgresService(Service):
    """A throw-away PostgreSQL cluster on loopback (tests); superuser ``factloom``, trust auth.

    Postgres refuses to run as root: as root the cluster belongs to the ``postgres`` OS user.
    """

    stop_signal = signal.SIGINT  # "fast" shutdown; SIGTERM would wait for clients to disconnect
    user = "factloom"
    database = "factloom"

    def __init__(self, settings: Settings, port: int | None = None) -> None:
        super().__init__("postgres", settings, match="postgres")
        url = settings.database_url
        host = urlsplit(url).hostname
        local = url.startswith("postgresql") and host in ("127.0.0.1", "localhost")
        self.data_dir = settings.home / "postgres" / "data"
        # explicit, else the running cluster's, else a loopback database_url's, else the default
        self.port = port or self._running_port() or (urlsplit(url).port if local else None) or 5432
        bins = sorted(Path("/").glob(PG_BIN_GLOB.lstrip("/")))
        self.bin_dir = bins[-1] if bins else None

    def _running_port(self) -> int | None:
        try:  # line 4 of postmaster.pid is the port of the running cluster
            return int((self.data_dir / "postmaster.pid").read_text().splitlines()[3])
        except (OSError, ValueError, IndexError):
            return None

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def _exe(self, name: str) -> str:
        exe = str(self.bin_dir / name) if self.bin_dir else shutil.which(name)
        if not exe or not Path(exe).exists():
            raise ServiceError(f"postgres: {name} not found; run scripts/setup.sh")
        return exe

    def spawn_user(self) -> str | None:
        return "postgres" if os.geteuid() == 0 else None

    def prepare(self) -> None:
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        user = self.spawn_user()
        if user:
            entry = pwd.getpwnam(user)
            for path in (self.data_dir.parent, self.data_dir):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            for parent in self.data_dir.parents:  # the postgres user must be able to reach it
                if parent.stat().st_mode & 0o001 == 0 and parent.stat().st_uid != entry.pw_uid:
                    raise ServiceError(f"postgres: {parent} is not searchable by the {user} user")
        proc = subprocess.run(  # noqa: S603 - initdb on our own data directory
            [self._exe("initdb"), "-D", str(self.data_dir), "-U", self.user, "--auth=trust",
             "-E", "UTF8", "--no-locale"],
            capture_output=True, text=True, check=False, user=user,
            group=pwd.getpwnam(user).pw_gid if user else None, cwd="/",
        )
        if proc.returncode != 0:
            out = (proc.stdout + proc.stderr)[-4000:]
            raise ServiceError(f"postgres: initdb failed:\n{out}")

    def command(self) -> list[str]:
        return [self._exe("postgres"), "-D", str(self.data_dir), "-p", str(self.port),
                "-k", str(self.data_dir), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]

    def _connect(self, dbname: str) -> psycopg.Connection[tuple[object, ...]]:
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user=self.user, dbname=dbname,
                               connect_timeout=2, autocommit=True)

    def probe(self) -> bool:
        import psycopg

        try:
            self._connect("postgres").close()
            return True
        except psycopg.Error:
            return False

    def after_start(self, deadline: float) -> None:
        with self._connect("postgres") as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,))
            if found.fetchone() is None:
                conn.execute(f'CREATE DATABASE "{self.database}"')  # a constant name, not input


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
