"""What a worker learns for the check stage, against the real Neo4j and ledger: type constraints from the
kb's graph plus a declared schema (relearned after the refresh period), and source trust from verdicts."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import update

from factloom.config import Settings
from factloom.graph import FactWrite, Neo4jStore, fact_id_for
from factloom.ledger import Database, FactSubmission, Status
from factloom.platform.ingest import service as ingest
from factloom.platform.ingest.schemas import FactIn
from factloom.verify import Claim
from factloom.workers.context import WorkerContext
from factloom.workers.verifiers import trust_counts

pytestmark = pytest.mark.integration

KB = "chk-setup"


def write(store: Neo4jStore, rows: list[tuple[str, str, str]]) -> None:
    store.write_facts(KB, [FactWrite(fact_id=fact_id_for(KB, s, p, o), subject=s, predicate=p, object=o, source="t")
                           for s, p, o in rows])


def claim(s: str, p: str, o: str) -> Claim:
    return Claim(submission_id=f"{s}{p}{o}", fact_id=fact_id_for(KB, s, p, o), subject=s, predicate=p, object=o)


def test_types_from_the_graph_and_a_declared_schema(
    store: Neo4jStore, db: Database, settings: Settings, tmp_path: Path
) -> None:
    store.drop_kb(KB)
    write(store, [("Paris", "instance_of", "City"), ("France", "instance_of", "Country"),
                  ("Ada", "is_a", "Person"), ("France", "capital", "Paris")])
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"born_in": {"domain": ["person"], "range": ["city"]}}))
    ctx = WorkerContext(settings.model_copy(update={"type_schema_path": str(schema), "verifier_refresh_s": 3600}))
    try:
        claims = [claim("France", "capital", "Ada"), claim("Paris", "born_in", "Ada"), claim("Ada", "born_in", "Paris"),
                  claim("Rome", "instance_of", "City"), claim("Italy", "capital", "Rome")]
        checkers = ctx.checks.for_chunk(KB, claims)
        types = next(v for v in checkers.verifiers if v.name == "types")
        learned, declared, fits, _, same_chunk = types.check(claims, {}, datetime.now(UTC))
        assert learned.probability == 0.2 and "'capital' has only taken city" in learned.explanation
        assert declared.probability == 0.02 and "must take person" in declared.explanation
        assert fits.probability == 0.9
        assert same_chunk.probability == 0.9  # Rome's type came with the chunk itself
        assert [v.name for v in checkers.verifiers] == [
            "consistency", "types", "corroboration", "plausibility", "text_evidence", "image_evidence"]

        # cached: a new type fact is not seen until the refresh period has passed
        write(store, [("Lyon", "instance_of", "City"), ("Bob", "capital", "Lyon"), ("Bob", "instance_of", "Person")])
        assert ctx.checks.constraints(KB).domain["capital"] == frozenset({"country"})
        ctx.settings.verifier_refresh_s = 0.0
        assert ctx.checks.constraints(KB).domain["capital"] == frozenset({"country", "person"})
    finally:
        ctx.store.close()
        ctx.db.dispose()
        store.drop_kb(KB)


def test_trust_counts_read_verdicts_and_review_decisions_from_the_ledger(db: Database) -> None:
    source = f"trust-probe-{datetime.now(UTC).timestamp()}"
    rows = [FactIn(subject=f"S{i}", predicate="p", object="o", source=source) for i in range(4)]
    ids = ingest.submit(db=db, kb=KB, facts=rows, max_facts=10, api_key_id=None).ids
    # as if checked (or decided by a reviewer): reviewed and committed count as true, rejected as false,
    # a submission still waiting for review not at all
    with db.session() as session:
        for sid, status in zip(ids, (Status.committed, Status.reviewed, Status.rejected, Status.needs_review),
                               strict=True):
            session.execute(update(FactSubmission).where(FactSubmission.id == sid).values(status=status))
    assert trust_counts(db)[source] == (2, 1)


def test_trust_and_fusion_labels_on_postgres(postgres_url: str) -> None:
    """The ledger reads of the check stage and of ``train fusion`` on PostgreSQL: outcomes per source,
    review decisions over automatic verdicts, and check results (JSON details) as features."""
    from factloom.learn.verification import fusion_examples
    from factloom.ledger import CheckResult
    from factloom.platform.migrate import migrate_sql
    from factloom.platform.review import service as review

    migrate_sql(postgres_url)
    pg = Database(postgres_url)
    try:
        rows = [FactIn(subject=f"S{i}", predicate="p", object="o", source="pg-src") for i in range(4)]
        ids = ingest.submit(db=pg, kb="pg-check", facts=rows, max_facts=10, api_key_id=None).ids
        with pg.session() as session:
            for sid, status in zip(ids, (Status.committed, Status.rejected, Status.needs_review, Status.needs_review),
                                   strict=True):
                session.execute(update(FactSubmission).where(FactSubmission.id == sid).values(status=status))
            for sid in ids:
                session.add(CheckResult(submission_id=sid, verifier="consistency", probability=0.95, score=0.95,
                                        explanation="ok", details={"rule": "ok"}, model_version="consistency-1"))
        review.decide(db=pg, submission_id=ids[2], decision="accept", reason="", reviewer="pg")
        review.decide(db=pg, submission_id=ids[3], decision="keep_both", reason="", reviewer="pg")
        assert trust_counts(pg)["pg-src"] == (3, 1)  # committed + reviewed twice, rejected
        features, labels, origin = fusion_examples(pg, kb="pg-check")
        # keep_both says the fact holds (beside another value): a true label like accept
        assert sorted(labels) == [0, 1, 1, 1] and origin == {"review": 2, "auto": 2}
        assert [[r.verifier for r in row] for row in features] == [["consistency"]] * 4
        assert features[0][0].details == {"rule": "ok"}
    finally:
        pg.dispose()
