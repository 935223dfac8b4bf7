"""The local services start for real, answer with the test configuration and report their state."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import redis
from neo4j import GraphDatabase
from sqlalchemy import create_engine, text

from factloom.config import Settings, get_settings
from factloom.platform.process import Service, ServiceError, child_env
from factloom.platform.services import Neo4jService, RedisService, neo4j_lib_dir, status
from tests.services import NEO4J_PASSWORD, PORTS

pytestmark = pytest.mark.integration


def test_environment_matches_the_test_settings(settings: Settings) -> None:
    assert os.environ["FACTLOOM_HOME"] == str(settings.home)
    assert get_settings().neo4j_uri == settings.neo4j_uri == f"bolt://127.0.0.1:{PORTS['neo4j']}"
    assert get_settings().neo4j_auth() == ("neo4j", NEO4J_PASSWORD)
    env = child_env(settings)
    assert env["FACTLOOM_REDIS_URL"] == settings.redis_url
    assert env["FACTLOOM_NEO4J_PASSWORD"] == NEO4J_PASSWORD
    # the services' temp files (PyG's generated modules among them) stay under the home
    assert env["TMPDIR"] == str(settings.home / "run" / "tmp") and Path(env["TMPDIR"]).is_dir()


def test_neo4j_answers_with_the_configured_password(
    neo4j_service: Neo4jService, settings: Settings
) -> None:
    assert any(neo4j_lib_dir(settings).glob("neo4j-server-*.jar"))
    with GraphDatabase.driver(settings.neo4j_uri, auth=settings.neo4j_auth()) as driver:
        records, _, _ = driver.execute_query("RETURN 1 AS one")
    assert records[0]["one"] == 1
    neo4j_service.start()  # already up: a no-op
    assert neo4j_service.is_up()


def test_neo4j_rejects_the_initial_password(
    neo4j_service: Neo4jService, settings: Settings
) -> None:
    from neo4j.exceptions import AuthError

    with GraphDatabase.driver(settings.neo4j_uri, auth=("neo4j", "neo4j")) as driver, pytest.raises(AuthError):
        driver.verify_connectivity()


def test_redis_pings(redis_service: RedisService, settings: Settings) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    try:
        assert client.ping()
        client.set("factloom:test", "1")
        assert client.get("factloom:test") == b"1"
    finally:
        client.close()


def test_postgres_connects_with_sqlalchemy(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT current_database()")).scalar() == "factloom"
    finally:
        engine.dispose()


def test_status_reports_the_running_services(
    neo4j_service: Neo4jService, redis_service: RedisService, postgres_url: str, settings: Settings
) -> None:
    up = status(settings, postgres_port=PORTS["postgres"])
    assert up["neo4j"] and up["redis"] and up["postgres"]
    assert set(up) == {"neo4j", "redis", "postgres", "api", "worker", "learner", "beat"}


def test_a_service_that_cannot_start_raises_with_its_log(settings: Settings) -> None:
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: redis-server cannot bind and exits
    broken = RedisService(settings.model_copy(update={"redis_url": "redis://192.0.2.1:16390/0"}))
    broken.name = "redis-broken"
    broken.pid_file = broken.run_dir / "redis-broken.pid"
    broken.log_file = broken.log_dir / "redis-broken.log"
    try:
        with pytest.raises(ServiceError, match="(?s)redis-broken.*exited during start.*bind"):
            broken.start(timeout=10)
    finally:
        broken.stop()
    assert broken.pid() is None and not broken.pid_file.exists()
    assert "exit status 1" in broken.log_file.read_text()


class _CrashOnce(Service):
    """Kills itself with SIGKILL on its first start and lives on the second."""

    def __init__(self, settings: Settings, marker: Path) -> None:
        super().__init__("crash-once", settings, match="crash-once")
        self.marker = marker

    def command(self) -> list[str]:
        script = (
            "import os, signal, sys, time, pathlib; m = pathlib.Path(sys.argv[1])\n"
            "if not m.exists(): m.touch(); os.kill(os.getpid(), signal.SIGKILL)\n"
            "m.with_suffix('.ready').touch(); time.sleep(60)"
        )
        return [sys.executable, "-c", script, str(self.marker), "crash-once"]

    def probe(self) -> bool:
        return self.pid() is not None and self.marker.with_suffix(".ready").exists()


def test_a_child_that_dies_while_starting_is_started_again(settings: Settings, tmp_path: Path) -> None:
    service = _CrashOnce(settings, tmp_path / "crashed")
    try:
        service.start(timeout=20)
        assert service.is_up()
    finally:
        service.stop()
    log = service.log_file.read_text()
    assert "exited during start (killed by SIGKILL); starting again" in log
    assert log.count("start: ") == 2


def test_worker_children_share_the_cores() -> None:
    from factloom.workers.app import app, torch_threads

    assert app.conf.worker_concurrency == 2  # the setting's default, not the core count
    assert [torch_threads(2, 2), torch_threads(2, 16), torch_threads(4, 2), torch_threads(0, 3)] == [1, 8, 1, 3]
