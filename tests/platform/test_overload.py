"""Bounded work: a kb whose check backlog is full refuses the next batch with 429 and Retry-After,
writes nothing of it, and takes batches again once the checks caught up; a bulk load waits for that."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from factloom.client import Client
from factloom.config import Settings
from factloom.ledger import Database, FactSubmission
from factloom.platform.bulk import BulkResult, ingest_facts
from factloom.platform.process import Service
from factloom.platform.services import services
from tests.services import PORTS

pytestmark = pytest.mark.integration

KB = "backlog"


def batch(start: int, n: int) -> dict[str, object]:
    return {"kb": KB, "facts": [{"subject": f"Bridge {i}", "predicate": "crosses", "object": f"River {i % 30}",
                                 "source": "overload-test"} for i in range(start, start + n)]}


def rows(db: Database) -> int:
    with db.session() as session:
        return session.scalar(select(func.count()).where(FactSubmission.kb == KB)) or 0


def test_a_full_backlog_answers_429_and_writes_nothing_until_the_checks_catch_up(
    api: httpx.Client, db: Database, live: dict[str, Service], settings: Settings, tmp_path: Path
) -> None:
    port = PORTS["api"] + 60
    bounded = settings.model_copy(update={
        "home": tmp_path / "home", "database_url": settings.sql_url, "api_port": port, "api_workers": 1,
        "query_warm_up": False, "ingest_max_backlog": 300, "ingest_backlog_retry_s": 7,
    })
    server = services(bounded)["api"]
    server.start()
    worker = live["worker"]
    worker.stop()  # nothing checks: the backlog stays where the POSTs put it
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=dict(api.headers), timeout=60) as client:
            assert client.post("/v1/facts", json=batch(0, 300)).status_code == 202
            refused = client.post("/v1/facts", json=batch(300, 10))
            assert refused.status_code == 429, refused.text
            assert refused.headers["content-type"] == "application/problem+json"
            assert refused.headers["retry-after"] == "7"
            assert refused.json()["waiting"] == 300 and refused.json()["limit"] == 300
            assert rows(db) == 300  # the refused batch wrote nothing

            # a bulk load is held back, waiting as told, until the checks have caught up
            token = api.headers["authorization"].removeprefix("Bearer ")
            loaded: list[BulkResult] = []
            with Client(f"http://127.0.0.1:{port}", token, retries=0) as pipeline:
                pusher = threading.Thread(target=lambda: loaded.append(ingest_facts(
                    pipeline, batch(300, 10)["facts"], kb=KB, wait=False, show=False)))  # type: ignore[arg-type]
                pusher.start()
                time.sleep(2)
                assert pusher.is_alive() and rows(db) == 300
                worker.start()
                pusher.join(180)
            assert loaded and loaded[0].submitted == 10 and rows(db) == 310
    finally:
        if worker.pid() is None:
            worker.start()
        server.stop()
