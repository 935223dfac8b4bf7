"""Ingest: validate a batch whole, write it to the ledger in one transaction, enqueue its checks."""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from factloom.graph.types import entity_key, fact_id_for
from factloom.ledger import AuditEvent, Database, FactSubmission, IngestBatch, Status
from factloom.ledger.evidence import InvalidEvidence, check_image, store_image
from factloom.ledger.tables import new_id
from factloom.platform.errors import BadRequest, TooLarge, TooManyRequests, found
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


def submit(
    *, db: Database, kb: str, facts: Sequence[FactIn], max_facts: int, api_key_id: str | None,
    evidence_dir: Path | None = None, max_image_bytes: int = 2_000_000, actor: str = "system",
) -> Submitted:
    """Validate the whole batch (images included), then store its images and write it in one transaction.

    A batch with any bad fact raises before anything is written. Images are written before the ledger
    rows; a failure in between leaves only content-addressed files that a later upload reuses.
    """
    if len(facts) > max_facts:
        raise TooLarge(f"a batch holds at most {max_facts} facts; this one has {len(facts)}", limit=max_facts)
    images = _decode_images(facts, max_image_bytes)
    if images and evidence_dir is None:
        raise BadRequest("this platform does not accept evidence images")
    keyed = {submission_key(kb, f): f for f in facts}  # repeats inside one batch count once
    stored: dict[int, dict[str, Any]] = {}
    for i, (data, content_type) in images.items():
        assert evidence_dir is not None
        sha = store_image(evidence_dir, data, content_type)
        stored[id(facts[i])] = {"sha256": sha, "content_type": content_type, "bytes": len(data)}
    for attempt in range(2):
        try:
            return _write(db, kb, keyed, api_key_id, repeats=len(facts) - len(keyed), images=stored, actor=actor)
        except IntegrityError:
            # a concurrent batch stored one of these keys first; the retry sees it as a duplicate
            if attempt == 1:
                raise
    raise AssertionError("unreachable")


def _decode_images(facts: Sequence[FactIn], max_bytes: int) -> dict[int, tuple[bytes, str]]:
    """Index of fact → (decoded bytes, content type) for every uploaded image, all checked first."""
    out: dict[int, tuple[bytes, str]] = {}
    for i, fact in enumerate(facts):
        image = fact.evidence.image if fact.evidence else None
        if image is None:
            continue
        where = f"facts[{i}].evidence.image"
        if len(image.data) > 4 * (max_bytes // 3 + 1) + 4:
            raise TooLarge(f"{where}: images may be at most {max_bytes} bytes", limit=max_bytes, fact=i)
        try:
            data = base64.b64decode(image.data, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"{where}.data is not valid base64", fact=i) from None
        if len(data) > max_bytes:
            raise TooLarge(f"{where}: {len(data)} bytes, images may be at most {max_bytes}", limit=max_bytes, fact=i)
        try:
            check_image(data, image.content_type)
        except InvalidEvidence as exc:
            raise BadRequest(f"{where}: {exc}", fact=i) from None
        out[i] = (data, image.content_type)
    return out


def _evidence(fact: FactIn, images: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """What the ledger keeps of the evidence: the text, and an image by its hash (never its bytes)."""
    if fact.evidence is None:
        return None
    out: dict[str, Any] = fact.evidence.model_dump(exclude_none=True, exclude={"image"})
    if id(fact) in images:
        out["image"] = images[id(fact)]
    return out or None


def _write(db: Database, kb: str, keyed: dict[str, FactIn], api_key_id: str | None, repeats: int,
           images: dict[int, dict[str, Any]], actor: str) -> Submitted:
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
                evidence=_evidence(f, images),
                status=Status.pending,
            )
            for key, f in new.items()
        ]
        session.add_all(rows)
        session.add(AuditEvent(actor=actor, action="ingest.batch", target=f"batch:{batch.id}",
                               details={"kb": kb, "count": len(rows), "duplicates": len(existing) + repeats}))
        return Submitted(batch_id=batch.id, ids=[r.id for r in rows], duplicates=len(existing) + repeats)


def check_backlog(*, db: Database, kb: str, limit: int, retry_after: float) -> None:
    """Refuse a new batch (429) while ``limit`` or more of ``kb``'s submissions wait for their check;
    ``limit`` 0: no limit. Bounded work: a pipeline faster than the checks is told to wait rather
    than fill the queue without end."""
    if not limit:
        return
    with db.session() as session:
        waiting = session.scalar(
            select(func.count()).select_from(FactSubmission)
            .where(FactSubmission.status.in_([Status.pending, Status.checking]), FactSubmission.kb == kb)
        ) or 0
    if waiting >= limit:
        raise TooManyRequests(f"kb {kb!r} has {waiting} submissions waiting for their check (the limit is {limit}); "
                              f"send this batch again later", retry_after=retry_after, waiting=waiting, limit=limit)


def enqueue(ids: list[str], chunk: int) -> None:
    """Hand the new submissions to the check workers; if the broker is down the sweeper will."""
    from factloom.workers.tasks import enqueue_check

    try:
        enqueue_check(ids, chunk)
    except Exception:  # the ledger already holds them as pending: nothing is lost
        log.exception("could not enqueue %d submissions; the sweeper will retry", len(ids))


def get_batch(*, db: Database, batch_id: str) -> tuple[IngestBatch, dict[str, int]]:
    with db.session() as session:
        batch = found(session.get(IngestBatch, batch_id), f"batch {batch_id}")
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
        row = found(session.get(FactSubmission, submission_id), f"submission {submission_id}")
        _ = row.checks  # load while the session is open
        return row
