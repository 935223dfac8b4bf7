"""Neo4j from the jars Maven Central publishes (it has no community standalone archive).

The server module and its dependencies are copied by ``mvn dependency:copy-dependencies`` with
``deploy/neo4j/pom.xml`` into the shared cache (:func:`ensure_neo4j`) and started with the entry point
the packaged ``bin/neo4j`` uses; the configured (or generated) password replaces the initial
``neo4j/neo4j`` on first start.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from factloom.config import NEO4J_VERSION, Settings
from factloom.platform.process import Service, ServiceError, host_port, tail

__all__ = ["Neo4jService", "neo4j_lib_dir", "ensure_neo4j"]

POM = Path(__file__).resolve().parents[3] / "deploy" / "neo4j" / "pom.xml"
# JVM flags from the server.jvm.additional defaults of the packaged neo4j.conf
NEO4J_JVM_FLAGS = [
    "-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow", "-XX:+DisableExplicitGC",
    "-Djdk.nio.maxCachedBufferSize=1024", "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dlog4j2.disable.jmx=true", "-Djdk.tls.ephemeralDHKeySize=2048",
    "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED",
]


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
