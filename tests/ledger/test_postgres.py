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


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('ledger')}/ledger.db"
    return str(request.getfixturevalue("postgres_url"))


def test_every_ledger_instant_is_read_back_in_utc_and_compares_as_one(ledger_url: str) -> None:
    from datetime import datetime, timedelta, timezone

    from sqlalchemy import select

    from factloom.ledger import IngestBatch

    migrate_sql(ledger_url)
    db = Database(ledger_url)
    noon_in_paris = datetime(2026, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=1)))
    try:
        with db.session() as session:
            session.add_all([IngestBatch(id="tz-aware", kb="tz", count=1, created_at=noon_in_paris),
                             IngestBatch(id="tz-naive", kb="tz", count=1, created_at=datetime(2026, 1, 1, 11, 0))])
        with db.session() as session:
            aware, naive = session.get(IngestBatch, "tz-aware"), session.get(IngestBatch, "tz-naive")
            assert aware is not None and naive is not None
            # the same instant, in UTC, aware of it, on either database (a naive value is taken as UTC)
            assert aware.created_at == naive.created_at == datetime(2026, 1, 1, 11, 0, tzinfo=timezone.utc)
            assert aware.created_at.utcoffset() == timedelta(0)
            after = select(IngestBatch.id).where(IngestBatch.kb == "tz").order_by(IngestBatch.id)
            just_before = noon_in_paris - timedelta(seconds=1)
            assert session.scalars(after.where(IngestBatch.created_at > just_before)).all() == ["tz-aware", "tz-naive"]
            assert session.scalars(after.where(IngestBatch.created_at > noon_in_paris)).all() == []
            assert session.scalars(after.where(IngestBatch.created_at > datetime(2026, 1, 1, 10, 59))).all() == \
                ["tz-aware", "tz-naive"]
    finally:
        with db.session() as session:
            session.query(IngestBatch).filter(IngestBatch.kb == "tz").delete()
        db.dispose()


def test_the_migrations_build_exactly_the_tables_the_code_declares(ledger_url: str) -> None:
    import warnings

    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from factloom.ledger import Base

    migrate_sql(ledger_url)
    db = Database(ledger_url)
    with db.engine.connect() as connection, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # alembic warns about SQLite's expression indexes it cannot read
        drift = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    db.dispose()
    assert drift == []
