"""Faults on the real services: a worker, Redis or Neo4j killed -9 mid-ingest, the API killed amid
POSTs, PostgreSQL restarted: each started again loses nothing and duplicates nothing; a store whose
pooled connection Neo4j closed reads on."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import httpx
import pytest
from sqlalchemy import func, select

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.ledger import Database, FactSubmission, Status
from factloom.platform.auth.service import create_key
from factloom.platform.migrate import migrate_sql
from factloom.platform.process import Service
from factloom.platform.services import PostgresService, services
from tests.services import PORTS, running

pytestmark = pytest.mark.integration

N = 3000


def statuses(db: Database, kb: str) -> dict[str, int]:
    with db.session() as session:
        rows = session.execute(
            select(FactSubmission.status, func.count()).where(FactSubmission.kb == kb).group_by(FactSubmission.status)
        ).all()
    return {s.value: n for s, n in rows}


def test_worker_killed_mid_batch_loses_and_duplicates_nothing(
    api: httpx.Client, db: Database, store: Neo4jStore, worker: object
) -> None:
    kb = "crash"
    rows = [{"subject": f"Film {i}", "predicate": "directed_by", "object": f"Director {i % 300}",
             "source": "crash-test"} for i in range(N)]
    for start in range(0, N, 1000):
        assert api.post("/v1/facts", json={"kb": kb, "facts": rows[start:start + 1000]}).status_code == 202

    deadline = time.monotonic() + 120
    while statuses(db, kb).get("committed", 0) == 0:
        assert time.monotonic() < deadline, "no progress before the kill"
        time.sleep(0.2)
    pid = worker.pid()  # type: ignore[attr-defined]
    os.killpg(os.getpgid(pid), signal.SIGKILL)  # the worker and its pool children, mid-task
    time.sleep(1)
    interrupted = statuses(db, kb)
    assert interrupted.get("committed", 0) < N, "the kill came too late to test anything"

    worker.start()  # type: ignore[attr-defined]
    deadline = time.monotonic() + 300
    while statuses(db, kb).get(Status.committed.value, 0) < N:
        assert time.monotonic() < deadline, f"stuck at {statuses(db, kb)}"
        time.sleep(0.5)
    assert statuses(db, kb) == {"committed": N}
    assert store.count(kb) == (N + 300, N)
    duplicates = store.run(
        "MATCH ()-[r:FACT {kb: $kb}]->() WITH r.fact_id AS id, count(*) AS n WHERE n > 1 RETURN count(id) AS d", kb=kb
    )
    assert duplicates[0]["d"] == 0


def test_a_read_on_a_connection_neo4j_closed_succeeds(store: Neo4jStore, settings: Settings) -> None:
    # reads are auto-commit statements without the driver's transaction retries: a read on the
    # connection the server killed is tried again on a fresh one
    reader = Neo4jStore(settings.neo4j_uri, settings.neo4j_auth())
    try:
        for _ in range(2):
            own = reader.run("SHOW TRANSACTIONS YIELD connectionId, currentQuery "
                             "WHERE currentQuery STARTS WITH 'SHOW TRANSACTIONS' RETURN connectionId", routing="r")
            killed = store.run("CALL dbms.killConnection($id) YIELD message RETURN message",
                               id=own[0]["connectionId"])
            assert killed == [{"message": "Connection found"}]
            assert reader.run("RETURN 1 AS ok", routing="r") == [{"ok": 1}]
    finally:
        reader.close()


# --- a store killed -9 during ingest, then started again --------------------------------------

def _kill(service: Service) -> None:
    pid = service.pid()
    assert pid is not None, f"{service.name} is not running"
    os.killpg(pid, signal.SIGKILL)  # own session: the group is the service and its children
    deadline = time.monotonic() + 30
    while service.pid() is not None:
        assert time.monotonic() < deadline, f"{service.name} outlived SIGKILL"
        time.sleep(0.1)


def _post(api: httpx.Client, kb: str, start: int, n: int) -> httpx.Response:
    facts = [{"subject": f"Track {i}", "predicate": "performed_by", "object": f"Band {i % 40}",
              "source": "fault-test"} for i in range(start, start + n)]
    return api.post("/v1/facts", json={"kb": kb, "facts": facts})


def _settled_once(db: Database, store: Neo4jStore, kb: str, accepted: int, timeout: float = 300) -> None:
    """Every fact the API took (202) committed, each exactly once in the graph."""
    deadline = time.monotonic() + timeout
    while statuses(db, kb).get(Status.committed.value, 0) < accepted:
        assert time.monotonic() < deadline, f"stuck at {statuses(db, kb)} of {accepted}"
        time.sleep(0.5)
    assert statuses(db, kb) == {"committed": accepted}
    assert store.count(kb)[1] == accepted
    duplicates = store.run("MATCH ()-[r:FACT {kb: $kb}]->() WITH r.fact_id AS id, count(*) AS n "
                           "WHERE n > 1 RETURN count(id) AS d", kb=kb)
    assert duplicates[0]["d"] == 0


def test_redis_killed_and_started_without_its_data_loses_no_fact(
    api: httpx.Client, db: Database, store: Neo4jStore, redis_service: Service, settings: Settings
) -> None:
    # the batch is in the ledger before it is enqueued: while Redis is down a POST still answers
    # 202, and the sweeper sends what Redis forgot once it is back (docs: "When a store goes down")
    kb = "redis-fault"
    for start in range(0, 1500, 500):
        assert _post(api, kb, start, 500).status_code == 202
    _kill(redis_service)
    shutil.rmtree(settings.home / "redis", ignore_errors=True)  # no persistence: queue and locks gone
    for start in range(1500, 2000, 250):
        answer = _post(api, kb, start, 250)
        assert answer.status_code == 202, answer.text
    redis_service.start()
    _settled_once(db, store, kb, 2000)


def test_neo4j_killed_during_commits_then_started_commits_everything_and_queries_wait(
    api: httpx.Client, anonymous: httpx.Client, db: Database, store: Neo4jStore, neo4j_service: Service
) -> None:
    kb = "neo4j-fault"
    for start in range(0, 1500, 500):
        assert _post(api, kb, start, 500).status_code == 202
    deadline = time.monotonic() + 120
    while statuses(db, kb).get("committed", 0) == 0:
        assert time.monotonic() < deadline, "no commit before the kill"
        time.sleep(0.2)
    _kill(neo4j_service)
    try:
        answer = api.post("/v1/query", json={"question": "who performed [Track 1]", "kb": kb})
        assert answer.status_code == 503, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        assert int(answer.headers["retry-after"]) >= 1
        ready = anonymous.get("/readyz")
        assert ready.status_code == 503 and ready.json()["checks"]["neo4j"] is False
        assert _post(api, kb, 1500, 500).status_code == 202  # the ledger takes facts meanwhile
    finally:
        neo4j_service.start()
    _settled_once(db, store, kb, 2000)
    assert api.post("/v1/query", json={"question": "who performed [Track 1]", "kb": kb}).status_code == 200


def test_the_api_killed_amid_posts_leaves_each_batch_whole_or_absent(
    api: httpx.Client, db: Database, store: Neo4jStore, live: dict[str, Service]
) -> None:
    kb = "api-fault"
    answers: list[int | None] = []

    def pump() -> None:
        for n in range(40):
            try:
                answers.append(_post(api, kb, n * 200, 200).status_code)
            except httpx.TransportError:
                answers.append(None)  # no answer: the batch may or may not have been taken

    sender = threading.Thread(target=pump)
    sender.start()
    deadline = time.monotonic() + 60
    while len(answers) < 3:
        assert time.monotonic() < deadline and sender.is_alive(), f"posting stalled: {answers}"
        time.sleep(0.01)
    _kill(live["api"])
    sender.join()
    live["api"].start()
    assert 202 in answers and None in answers, f"the kill did not fall amid the posts: {answers}"
    with db.session() as session:
        sizes = session.execute(select(FactSubmission.batch_id, func.count())
                                .where(FactSubmission.kb == kb).group_by(FactSubmission.batch_id)).all()
    assert {n for _, n in sizes} == {200}, "a batch was half written"
    assert len(sizes) >= answers.count(202)
    _settled_once(db, store, kb, 200 * len(sizes))


@pytest.fixture(scope="module")
def own_postgres(settings: Settings) -> Iterator[PostgresService]:
    """A PostgreSQL of this module's own, to restart without touching the session's."""
    home = settings.home / "pg-fault"
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o755)  # the postgres OS user must reach its data directory
    with running(PostgresService(settings.model_copy(update={"home": home}), port=PORTS["postgres"] + 50)) as pg:
        yield pg


def test_postgres_restarted_during_ingest_loses_no_fact(
    store: Neo4jStore, own_postgres: PostgresService, settings: Settings,
    worker_with: Callable[..., AbstractContextManager[Service]],
) -> None:
    kb = "pg-fault"
    migrate_sql(own_postgres.url)
    ledger = Database(own_postgres.url)
    token, _ = create_key(db=ledger, name="pg-fault", scopes=["ingest"])
    port = PORTS["api"] + 70
    on_pg = settings.model_copy(update={"home": settings.home / "pg-fault-api", "database_url": own_postgres.url,
                                        "api_port": port, "api_workers": 1, "query_warm_up": False})
    server = services(on_pg)["api"]
    with worker_with(database_url=own_postgres.url):
        server.start()
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60,
                              headers={"Authorization": f"Bearer {token}"}) as client:
                for start in range(0, 1000, 500):
                    assert _post(client, kb, start, 500).status_code == 202
                own_postgres.stop()
                refused = _post(client, kb, 1000, 500)
                assert refused.status_code == 503, refused.text  # nothing written: the ledger is down
                assert refused.headers["content-type"] == "application/problem+json"
                assert int(refused.headers["retry-after"]) >= 1
                own_postgres.start()
                assert _post(client, kb, 1000, 500).status_code == 202
            _settled_once(ledger, store, kb, 1500)
        finally:
            server.stop()
            ledger.dispose()
