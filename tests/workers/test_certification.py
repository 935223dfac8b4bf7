"""Live certification on the running platform: the Celery check worker writes audit samples with the
verdicts, and a wrong auto-accept the audit finds is rejected in review through ``/v1/review`` and leaves
Neo4j (real API, worker, Redis, Neo4j and ledger; tests/conftest.py starts them)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager

import httpx
from sqlalchemy import select

from factloom.graph import Neo4jStore
from factloom.ledger import AuditSample, Database, FactSubmission
from factloom.platform.certification import service as audit
from factloom.platform.process import Service
from tests.support.api import MOVIES, facts, submission_ids, wait_batch, wait_status


def test_the_check_worker_samples_automatic_verdicts_and_an_audit_finding_reaches_review(
    api: httpx.Client, db: Database, store: Neo4jStore, worker_with: Callable[..., AbstractContextManager[Service]],
) -> None:
    kb = f"audit{uuid.uuid4().hex[:8]}"
    with worker_with(audit_share=1.0):  # every automatic verdict is audited: the sample is the whole stream
        batch = api.post("/v1/facts", json={"kb": kb, "facts": facts(MOVIES[:3])}).json()
        wait_batch(api, batch["batch_id"])
        clash = api.post("/v1/facts", json={"kb": kb, "facts": facts([("Blade Runner", "release_year", "1999")],
                                                                      "blog")}).json()
        (waiting,) = submission_ids(db, clash["batch_id"])
        wait_status(api, waiting, "needs_review")
    committed = [i for i in submission_ids(db, batch["batch_id"]) if api.get(f"/v1/facts/{i}").json()["status"]
                 == "committed"]
    assert committed
    with db.session() as session:
        samples = session.scalars(select(AuditSample).where(AuditSample.kb == kb)).all()
    assert sorted(s.submission_id for s in samples) == sorted(committed)  # the review item is not sampled
    assert all(s.verdict == "accepted" and s.inclusion == 1.0 and s.probability is not None for s in samples)

    sid = committed[0]
    fact = api.get(f"/v1/facts/{sid}").json()
    sample = next(s for s in samples if s.submission_id == sid)
    assert audit.label(db=db, sample_id=sample.id, value="does_not_hold", actor="user:auditor")
    wait_status(api, sid, "needs_review")
    with db.session() as session:
        assert session.get(FactSubmission, sid).review_reason == "audit"  # type: ignore[union-attr]
    assert store.facts_by_id(kb, [fact["fact_id"]])  # still in the graph while it waits
    decided = api.post(f"/v1/review/{sid}", json={"decision": "reject", "reason": "the audit was right"})
    assert decided.status_code == 200 and decided.json()["status"] == "rejected"
    assert store.facts_by_id(kb, [fact["fact_id"]]) == []
    store.drop_kb(kb)
