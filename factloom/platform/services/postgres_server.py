"""PostgreSQL from the OS packages, for the tests: a throw-away cluster on loopback. As root it runs
as the ``postgres`` OS user, since it refuses to run as root."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from factloom.config import Settings
from factloom.platform.process import Service, ServiceError

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresService"]

PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"


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
