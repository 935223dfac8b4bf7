"""The sweeper re-enqueues a submission only when its message is gone, never one that is queued."""

from __future__ import annotations

import time

import httpx
import pytest
import redis
from sqlalchemy import func, select

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.ledger import Database, FactSubmission, Status
from factloom.platform.process import Service
from factloom.workers import sweeper
from factloom.workers.app import app as celery_app
from factloom.workers.context import WorkerContext

pytestmark = pytest.mark.integration

N = 600  # three check messages of 250


def committed(db: Database, kb: str) -> int:
    with db.session() as session:
        return session.scalar(select(func.count()).where(FactSubmission.kb == kb,
                                                         FactSubmission.status == Status.committed)) or 0


def test_a_queued_submission_is_left_alone_and_a_lost_one_is_sent_again(
    api: httpx.Client, db: Database, store: Neo4jStore, live: dict[str, Service], settings: Settings
) -> None:
    kb = "sweep"
    ctx = WorkerContext(settings)
    broker = redis.Redis.from_url(settings.redis_url)
    worker = live["worker"]
    worker.stop()  # nothing consumes the check queue: the batch waits there, like behind a backlog
    try:
        facts = [{"subject": f"Song {i}", "predicate": "performed_by", "object": f"Band {i % 50}",
                  "source": "sweep-test"} for i in range(N)]
        assert api.post("/v1/facts", json={"kb": kb, "facts": facts}).status_code == 202
        with db.session() as session:
            ids = set(session.scalars(select(FactSubmission.id).where(FactSubmission.kb == kb)))
        assert len(ids) == N
        time.sleep(settings.sweep_after_s + 1)  # every one of them is stale now

        to_check, to_commit = sweeper.lost_submissions(ctx, celery_app, broker)
        assert ids.isdisjoint(to_check) and ids.isdisjoint(to_commit), "queued submissions counted as lost"

        broker.delete(sweeper.QUEUE)  # the broker lost its messages (a restart without persistence)
        to_check, _ = sweeper.lost_submissions(ctx, celery_app, broker)
        assert ids <= set(to_check)
    finally:
        worker.start()  # the sweeps the beat queued meanwhile run now and send the lost ones again

    deadline = time.monotonic() + 180
    while committed(db, kb) < N:
        assert time.monotonic() < deadline, f"{committed(db, kb)} of {N} committed"
        time.sleep(0.5)
    assert store.count(kb) == (N + 50, N)
    ctx.db.dispose()
