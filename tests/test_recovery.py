"""A worker killed mid-batch, then restarted: nothing lost, nothing duplicated. A store whose pooled
connection Neo4j closed reads on."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest
from sqlalchemy import func, select

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.ledger import Database, FactSubmission, Status

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
