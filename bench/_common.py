"""What every benchmark shares: arguments, the platform it talks to, and the result file."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from factloom import __version__
from factloom.config import Settings, get_settings

__all__ = ["parser", "client", "percentile", "write_result", "REPO", "DEFAULT_DATA"]

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"


def parser(name: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"factloom bench {name}", description=description)
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="the benchmark data (../shared/data)")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / f"{name}.json")
    return p


def client(settings: Settings | None = None):  # type: ignore[no-untyped-def]
    from factloom.client import Client

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
    return Client(settings.base_url, key)


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
