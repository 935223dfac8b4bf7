"""Ingest: validate a batch whole, write it to the ledger in one transaction, enqueue its checks."""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from factloom.graph.types import entity_key, fact_id_for
from factloom.ledger import Database, FactSubmission, IngestBatch, Status
from factloom.ledger.tables import new_id
from factloom.platform.errors import NotFound, TooLarge
from factloom.platform.ingest.schemas import FactIn

__all__ = ["Submitted", "submission_key", "submit", "get_batch", "get_submission", "enqueue"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Submitted:
    batch_id: str
    ids: list[str]
    duplicates: int


def submission_key(kb: str, fact: FactIn) -> str:
    """The client's key, or the fact itself: the same fact from the same source is one submission."""
    if fact.key:
        return f"k:{fact.key}"
    raw = "\x1f".join(
        (kb, entity_key(fact.subject), fact.predicate, entity_key(fact.object), fact.source or "",
         fact.valid_from.isoformat() if fact.valid_from else "", fact.valid_to.isoformat() if fact.valid_to else "")
    )
    return "h:" + hashlib.sha256(raw.encode()).hexdigest()[:40]


def submit(*, db: Database, kb: str, facts: Sequence[FactIn], max_facts: int, api_key_id: str | None) -> Submitted:
    if len(facts) > max_facts:
        raise TooLarge(f"a batch holds at most {max_facts} facts; this one has {len(facts)}", limit=max_facts)
    keyed = {submission_key(kb, f): f for f in facts}  # repeats inside one batch count once
    for attempt in range(2):
        try:
            return _write(db, kb, keyed, api_key_id, repeats=len(facts) - len(keyed))
        except IntegrityError:
            # a concurrent batch stored one of these keys first; the retry sees it as a duplicate
            if attempt == 1:
                raise
    raise AssertionError("unreachable")


def _write(db: Database, kb: str, keyed: dict[str, FactIn], api_key_id: str | None, repeats: int) -> Submitted:
    with db.session() as session:
        existing = set(
            session.scalars(
                select(FactSubmission.key).where(FactSubmission.kb == kb, FactSubmission.key.in_(list(keyed)))
            )
        )
        new = {k: f for k, f in keyed.items() if k not in existing}
        batch = IngestBatch(id=new_id(), kb=kb, count=len(new), api_key_id=api_key_id)
        session.add(batch)
        session.flush()  # the batch row first: submissions reference it
        rows = [
            FactSubmission(
                id=new_id(), batch_id=batch.id, kb=kb, key=key,
                fact_id=fact_id_for(kb, f.subject, f.predicate, f.object),
                subject=f.subject, predicate=f.predicate, object=f.object, source=f.source,
                valid_from=f.valid_from, valid_to=f.valid_to,
                evidence=f.evidence.model_dump(exclude_none=True) if f.evidence else None,
                status=Status.pending,
            )
            for key, f in new.items()
        ]
        session.add_all(rows)
        return Submitted(batch_id=batch.id, ids=[r.id for r in rows], duplicates=len(existing) + repeats)


def enqueue(ids: list[str], chunk: int) -> None:
    """Hand the new submissions to the check workers; if the broker is down the sweeper will."""
    from factloom.workers.tasks import enqueue_check

    try:
        enqueue_check(ids, chunk)
    except Exception:  # the ledger already holds them as pending: nothing is lost
        log.exception("could not enqueue %d submissions; the sweeper will retry", len(ids))


def get_batch(*, db: Database, batch_id: str) -> tuple[IngestBatch, dict[str, int]]:
    with db.session() as session:
        batch = session.get(IngestBatch, batch_id)
        if batch is None:
            raise NotFound(f"no batch {batch_id}")
        rows = session.execute(
            select(FactSubmission.status, func.count())
            .where(FactSubmission.batch_id == batch_id)
            .group_by(FactSubmission.status)
        ).all()
    counts: Counter[str] = Counter({s.value: 0 for s in Status})
    counts.update({status.value: n for status, n in rows})
    return batch, dict(counts)


def get_submission(*, db: Database, submission_id: str) -> FactSubmission:
    with db.session() as session:
        row = session.get(FactSubmission, submission_id)
        if row is None:
            raise NotFound(f"no submission {submission_id}")
        _ = row.checks  # load while the session is open
        return row
