"""Child processes with pid files, logs and readiness probes: the machinery under ``services``.

A :class:`Service` is one local child process started in its own session, with a pid file under
``settings.home / "run"`` and its output appended to ``settings.home / "logs" / "<name>.log"``.
``start()`` is idempotent (a service already up is left alone), waits for readiness and raises
:class:`ServiceError` with the log tail when the service does not come up (and stops what it
started); ``stop()`` sends the service's shutdown signal to its process group, waits, then kills.

Children get the caller's environment plus the ``FACTLOOM_*`` values of the Settings object they
were started with (:func:`child_env`), so they see the same configuration.
"""

from __future__ import annotations

import abc
import json
import os
import pwd
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from factloom.config import Settings

__all__ = ["ServiceError", "Service", "child_env", "child_tmp", "http_ok", "wait_http", "host_port", "tail"]


class ServiceError(RuntimeError):
    """A local service could not be fetched, started or stopped; the message has the log tail."""


def host_port(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _pid_alive(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)  # reap our own exited child so it does not linger as a zombie
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # field 3 of /proc/<pid>/stat is the state; Z is a zombie
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def child_env(settings: Settings) -> dict[str, str]:
    """The caller's environment plus every Settings field as ``FACTLOOM_<NAME>``."""
    env = dict(os.environ)
    for name, value in settings.model_dump().items():
        if isinstance(value, (list, dict)):
            text = json.dumps(value)
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        env[f"FACTLOOM_{name.upper()}"] = text
    # resolved once (a generated one is written to home), so every child uses the same
    env["FACTLOOM_NEO4J_PASSWORD"] = settings.neo4j_auth()[1]
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a child that crashes in native code says where in its log
    # PyG writes each process's generated message-passing module to the temp dir and never removes
    # it (torch_geometric/template.py): under the home those files go when the services stop
    tmp = child_tmp(settings)
    tmp.mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(tmp)
    return env


def child_tmp(settings: Settings) -> Path:
    """The temp dir of the services a home runs; ``stop_all`` clears it."""
    return settings.home / "run" / "tmp"


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - our own loopback URL
            return 200 <= int(resp.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_http(url: str, timeout: float = 60.0) -> None:
    """Wait until ``url`` answers 2xx; raise :class:`ServiceError` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not http_ok(url):
        if time.monotonic() > deadline:
            raise ServiceError(f"{url} did not answer within {timeout:.0f}s")
        time.sleep(0.3)


class Service(abc.ABC):
    """One local child process with a pid file, a log file and a readiness probe.

    Subclasses give ``command()``, optionally ``prepare()`` (run before each spawn), ``probe()``
    (is it serving?) and ``after_start()``; ``match`` is a token of the command line, checked before
    a pid from a pid file is trusted or signalled.
    """

    stop_signal: int = signal.SIGTERM
    start_timeout: float = 60.0
    stop_timeout: float = 30.0

    def __init__(self, name: str, settings: Settings, match: str) -> None:
        self.name = name
        self.settings = settings
        self.match = match
        self.run_dir = settings.home / "run"
        self.log_dir = settings.home / "logs"
        self.pid_file = self.run_dir / f"{name}.pid"
        self.log_file = self.log_dir / f"{name}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, pid={self.pid()})"

    # overridables
    @abc.abstractmethod
    def command(self) -> list[str]:
        """The argv of the child process."""

    def prepare(self) -> None:
        """Create directories and config before a spawn."""

    def probe(self) -> bool:
        """Whether the service answers; by default, whether its process lives."""
        return self.pid() is not None

    def ready(self) -> bool:
        """Whether a starting service may be handed to ``after_start``; by default ``probe()``."""
        return self.probe()

    def after_start(self, deadline: float) -> None:
        """One-time work once the service is ready (passwords, databases)."""

    def spawn_user(self) -> str | None:
        return None

    # machinery
    def pid(self) -> int | None:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc.pid  # our own child: its Popen is the authority, not /proc
        try:
            pid = int(self.pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        if _pid_alive(pid) and self.match in _cmdline(pid):
            return pid
        return None

    def is_up(self) -> bool:
        return self.pid() is not None and self.probe()

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_file, lines)

    def _fail(self, why: str) -> ServiceError:
        return ServiceError(f"{self.name}: {why}; log {self.log_file}:\n{self.log_tail()}")

    def start(self, timeout: float | None = None, attempts: int = 2) -> None:
        """Start unless up and wait until ready; a child that dies while starting is spawned again,
        ``attempts`` times in all, each exit status written to the log."""
        if self.is_up():
            return
        deadline = time.monotonic() + (timeout or self.start_timeout)
        try:
            for attempt in range(1, attempts + 1):
                if self.pid() is None:
                    self._spawn()
                while not self.ready():
                    if self.pid() is None:
                        why = f"exited during start ({self._exit_status()})"
                        if attempt == attempts:
                            raise self._fail(why)
                        self._log_line(f"{why}; starting again")
                        break
                    if time.monotonic() > deadline:
                        raise self._fail(f"not ready after {timeout or self.start_timeout:.0f}s")
                    time.sleep(0.25)
                else:
                    break
            self.after_start(deadline)
        except BaseException:
            self.stop()  # a half-started service would hold its port and confuse the next start
            raise

    def _spawn(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.prepare()
        cmd = self.command()
        user = self.spawn_user()
        self._log_line(f"start: {' '.join(cmd)}")
        with open(self.log_file, "ab") as log:
            try:
                self._proc = subprocess.Popen(  # noqa: S603 - the service's own command line
                    cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=child_env(self.settings), start_new_session=True, user=user,
                    group=pwd.getpwnam(user).pw_gid if user else None,
                )
            except OSError as exc:
                raise self._fail(f"could not run {cmd[0]}: {exc}") from exc
        self.pid_file.write_text(f"{self._proc.pid}\n")

    def _exit_status(self) -> str:
        code = self._proc.poll() if self._proc is not None else None
        if code is None:
            return "status unknown"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit status {code}"

    def _log_line(self, text: str) -> None:
        with open(self.log_file, "ab") as log:
            log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n".encode())

    def stop(self, timeout: float | None = None) -> None:
        pid = self.pid()
        if pid is not None:
            try:
                os.killpg(pid, self.stop_signal)  # own session: the group holds its children too
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + (timeout or self.stop_timeout)
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _pid_alive(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                while _pid_alive(pid) and time.monotonic() < deadline + 10:
                    time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)
        self._proc = None
