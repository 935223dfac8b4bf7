"""The blind audit: the next sampled fact to label, shown without its verdict, and the labels given.

An audit label never changes a fact by itself. It enters the evidence of the kb's re-certification
(:mod:`factloom.learn.certification`, weight ``1 / inclusion``); and an automatic verdict the label
says is wrong — an accepted fact that does not hold, a rejected one that does — goes back to normal
review (``needs_review``, reason ``audit``): an accepted fact stays in the graph until a reviewer
rejects it (:func:`factloom.platform.review.service.decide` takes it out), a rejected one reaches the
graph only if a reviewer accepts it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, func, select, update

from factloom.ledger import AuditEvent, AuditSample, Database, FactSubmission, ReviewDecision, Status
from factloom.ledger.tables import AUDIT_LABELS, utcnow
from factloom.platform.errors import BadRequest, Conflict, found

__all__ = ["BlindItem", "next_item", "label", "backlog", "AUDIT_REASON", "SKIP"]

AUDIT_REASON = "audit"  # the review reason of a verdict the audit found wrong (factloom.verify.reasons)
SKIP = "skip"  # "can't tell": no label; the item stays for another auditor
# the submission statuses that still carry the fusion's own verdict (no reviewer has decided since)
_AUTOMATIC = {"accepted": (Status.accepted, Status.committed), "rejected": (Status.rejected,)}


@dataclass(frozen=True, slots=True)
class BlindItem:
    """What an auditor sees: the claim and its evidence, never the verdict, probability or verifier results."""

    sample_id: int
    kb: str
    submission_id: str
    subject: str
    predicate: str
    object: str
    evidence_text: str | None
    has_image: bool
    valid_from: Any
    valid_to: Any


def next_item(*, db: Database, kb: str | None = None, skip: Collection[int] = ()) -> BlindItem | None:
    """The oldest unlabelled sample (of ``kb``, else of any kb), leaving out the ones in ``skip``."""
    where: list[ColumnElement[bool]] = [AuditSample.label.is_(None)]
    if kb:
        where.append(AuditSample.kb == kb)
    if skip:
        where.append(AuditSample.id.not_in(sorted(skip)))
    with db.session() as session:
        found = session.execute(
            select(AuditSample.id, FactSubmission).join(FactSubmission, FactSubmission.id == AuditSample.submission_id)
            .where(*where).order_by(AuditSample.created_at, AuditSample.id).limit(1)
        ).first()
        if found is None:
            return None
        sample_id, row = found
        evidence = row.evidence or {}
        image = evidence.get("image")
        return BlindItem(sample_id=sample_id, kb=row.kb, submission_id=row.id, subject=row.subject,
                         predicate=row.predicate, object=row.object, evidence_text=evidence.get("text"),
                         has_image=isinstance(image, dict) and "sha256" in image, valid_from=row.valid_from,
                         valid_to=row.valid_to)


def backlog(*, db: Database, kb: str | None = None) -> int:
    """Sampled facts still waiting for their audit label."""
    where = [AuditSample.label.is_(None)] + ([AuditSample.kb == kb] if kb else [])
    with db.session() as session:
        return int(session.scalar(select(func.count()).select_from(AuditSample).where(*where)) or 0)


def label(*, db: Database, sample_id: int, value: str, actor: str) -> bool:
    """Record an auditor's label on a sample; returns whether the automatic verdict went back to review.

    ``value`` is one of :data:`~factloom.ledger.tables.AUDIT_LABELS`. A sample is labelled once; a
    second label is a conflict (two auditors at once: the first one counts).
    """
    if value not in AUDIT_LABELS:
        raise BadRequest(f"unknown audit label {value!r}; one of {', '.join(AUDIT_LABELS)}")
    with db.session() as session:
        sample = found(session.get(AuditSample, sample_id), f"audit sample {sample_id}")
        changed = session.execute(  # type: ignore[attr-defined]
            update(AuditSample).where(AuditSample.id == sample_id, AuditSample.label.is_(None))
            .values(label=value, labelled_by=actor, labelled_at=utcnow())
        ).rowcount
        if not changed:
            raise Conflict(f"audit sample {sample_id} is labelled already")
        wrong = (sample.verdict == "accepted") == (value == "does_not_hold")
        reviewed = session.scalar(select(func.count()).select_from(ReviewDecision)
                                  .where(ReviewDecision.submission_id == sample.submission_id)) or 0
        sent = 0
        if wrong and not reviewed:  # a reviewer's decision since is final: the audit only adds evidence
            sent = session.execute(  # type: ignore[attr-defined]
                update(FactSubmission).where(FactSubmission.id == sample.submission_id,
                                             FactSubmission.status.in_(list(_AUTOMATIC[sample.verdict])))
                .values(status=Status.needs_review, review_reason=AUDIT_REASON, updated_at=utcnow(),
                        verdict_reason=f"audit: an auditor found the automatic {sample.verdict[:-2]} wrong")
            ).rowcount
        session.add(AuditEvent(actor=actor, action="audit.label", target=sample.submission_id,
                               details={"sample": sample_id, "kb": sample.kb, "label": value,
                                        "verdict": sample.verdict, "to_review": bool(sent)}))
    return bool(sent)
