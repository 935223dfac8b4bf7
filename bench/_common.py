"""What every benchmark shares: arguments, the platform it talks to, and the result file."""

from __future__ import annotations

import argparse
import http.client
import json
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from factloom import __version__
from factloom.client import ApiError
from factloom.config import Settings, get_settings

__all__ = ["parser", "running_platform", "client", "load_client", "LoadClient", "percentile", "write_result",
           "read_triples", "REPO", "DEFAULT_DATA"]

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"


def read_triples(path: Path) -> list[tuple[str, str, str]]:
    """``head<TAB>relation<TAB>tail`` lines (CoDEx, LKGE); other lines are skipped."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.strip().split("\t")
        if len(parts) == 3:
            out.append((parts[0], parts[1], parts[2]))
    return out


def parser(name: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"factloom bench {name}", description=description)
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="the benchmark data (../shared/data)")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / f"{name}.json")
    return p


def running_platform(settings: Settings | None) -> tuple[str, str]:
    """The running platform's base URL and an API key, or exit saying how to start it."""
    settings = settings or get_settings()
    key_path = settings.home / "api-key"
    key = settings.api_key or (key_path.read_text().strip() if key_path.exists() else "")
    if not key:
        sys.exit("no API key: start the platform with 'factloom up' first")
    import httpx

    try:
        httpx.get(f"{settings.base_url}/readyz", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        sys.exit(f"the platform at {settings.base_url} is not ready ({exc}); run 'factloom up' first")
    return settings.base_url, key


def client(settings: Settings | None = None):  # type: ignore[no-untyped-def]
    from factloom.client import Client

    return Client(*running_platform(settings))


class LoadClient:
    """Asks questions from many threads, each over its own kept-alive ``http.client`` connection.

    The load generator shares the two cores with the platform it measures: one ``httpx`` client
    shared by 8 threads took 1.0-1.7 ms of CPU a request, this 0.35-0.46 ms, and that CPU was the
    server's (1-hop at 8 clients: 191-228 against 231-255 questions/s in one script).
    """

    def __init__(self, base_url: str, key: str, timeout: float = 120.0) -> None:
        url = urlsplit(base_url)
        self._address = (url.hostname or "127.0.0.1", url.port or 80)
        self._headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self._timeout = timeout
        self._local = threading.local()

    def query(self, question: str, kb: str = "default", top_k: int = 5, **extra: Any) -> dict[str, Any]:
        body = json.dumps({"question": question, "kb": kb, "top_k": top_k, **extra})
        for attempt in range(2):
            connection = getattr(self._local, "connection", None)
            if connection is None:
                connection = self._local.connection = http.client.HTTPConnection(*self._address,
                                                                                 timeout=self._timeout)
            try:
                connection.request("POST", "/v1/query", body, self._headers)
                response = connection.getresponse()
                status, payload = response.status, response.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # the server closed a kept-alive connection between requests: open another, once
                connection.close()
                self._local.connection = None
                if attempt:
                    raise
        if status >= 400:
            try:
                problem = json.loads(payload)
            except ValueError:
                problem = {"detail": payload.decode(errors="replace")}
            raise ApiError(status, problem)
        return json.loads(payload)  # type: ignore[no-any-return]


def load_client(settings: Settings | None = None) -> LoadClient:
    return LoadClient(*running_platform(settings))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def versions() -> dict[str, str]:
    import neo4j
    import torch

    from factloom.config import NEO4J_VERSION

    return {"factloom": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "neo4j_driver": neo4j.__version__, "neo4j_server": NEO4J_VERSION}


def write_result(out: Path, *, benchmark: str, dataset: str, split: str, settings: dict[str, Any],
                 metrics: dict[str, Any], started: float) -> dict[str, Any]:
    result = {
        "benchmark": benchmark, "dataset": dataset, "split": split, "settings": settings,
        "versions": versions(), "seconds": round(time.perf_counter() - started, 2),
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpus": __import__("os").cpu_count()},
        "metrics": metrics,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return result


median = statistics.median
