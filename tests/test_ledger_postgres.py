"""The ledger's migrations and services on PostgreSQL (SQLite is covered by every other test)."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect

from factloom.ledger import Database, FactSubmission, Status
from factloom.platform.auth.service import authenticate, create_key
from factloom.platform.errors import Conflict, Unauthorized
from factloom.platform.ingest import service as ingest
from factloom.platform.ingest.schemas import FactIn
from factloom.platform.migrate import migrate_sql
from factloom.platform.review import service as review

pytestmark = pytest.mark.integration


def test_ledger_on_postgres(postgres_url: str) -> None:
    migrate_sql(postgres_url)
    migrate_sql(postgres_url)  # idempotent
    db = Database(postgres_url)
    try:
        tables = set(inspect(db.engine).get_table_names())
        assert {"ingest_batch", "fact_submission", "check_result", "review_decision", "audit_event",
                "model_version", "api_key", "alembic_version"} <= tables

        token, principal = create_key(db=db, name="pg", scopes=["ingest", "review"])
        assert authenticate(db=db, token=token).scopes == {"ingest", "review"}
        with pytest.raises(Unauthorized):
            authenticate(db=db, token=token[:-2] + "xx")
        assert not principal.has("admin")

        facts = [FactIn(subject="Alien", predicate="release_year", object="1979"),
                 FactIn(subject="Alien", predicate="release_year", object="1979")]
        first = ingest.submit(db=db, kb="pg", facts=facts, max_facts=10, api_key_id=principal.key_id)
        again = ingest.submit(db=db, kb="pg", facts=facts[:1], max_facts=10, api_key_id=None)
        assert (len(first.ids), first.duplicates, len(again.ids), again.duplicates) == (1, 1, 0, 1)
        batch, counts = ingest.get_batch(db=db, batch_id=first.batch_id)
        assert batch.count == 1 and counts["pending"] == 1

        with db.session() as session:
            session.get(FactSubmission, first.ids[0]).status = Status.needs_review  # type: ignore[union-attr]
        rows, total = review.list_submissions(db=db, kb="pg", status="needs_review", predicate=None, source=None,
                                              batch_id=None, limit=10, offset=0)
        assert total == 1 and rows[0].id == first.ids[0]
        assert review.decide(db=db, submission_id=first.ids[0], decision="reject", reason="test",
                             reviewer="pg") is Status.rejected
        with pytest.raises(Conflict):
            review.decide(db=db, submission_id=first.ids[0], decision="accept", reason="", reviewer="pg")
    finally:
        db.dispose()
