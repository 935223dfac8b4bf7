"""Review: list what the checkers could not decide; record, audit and carry out decisions."""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import timedelta

from sqlalchemy import delete, func, select, update

from factloom.graph import Neo4jStore
from factloom.ledger import AuditEvent, CheckResult, Database, FactSubmission, ReviewDecision, Status
from factloom.ledger.tables import utcnow
from factloom.platform.errors import BadRequest, Conflict, NotFound

__all__ = ["list_submissions", "kb_of", "decide", "reopen", "DECISIONS", "DECIDED"]

log = logging.getLogger(__name__)

REVIEWABLE = frozenset({Status.needs_review})
# accept: the claim holds (a new value of a functional predicate replaces the current one);
# keep_both: it holds beside the current value (two same-name entities, or a predicate that is not
# functional for this subject); reject: it never reaches the graph
DECISIONS = ("accept", "keep_both", "reject")
# what a submission can be reopened from: decided by a reviewer or by the fusion, committed or not
DECIDED = frozenset({Status.accepted, Status.rejected, Status.reviewed, Status.committed})


def list_submissions(
    *, db: Database, kb: str | None, status: str, predicate: str | None, source: str | None,
    batch_id: str | None, limit: int, offset: int, kbs: Collection[str] | None = None,
) -> tuple[list[FactSubmission], int]:
    """One page of submissions in ``status``, oldest first, and how many there are; ``kb`` and ``kbs``
    (any of them; ``None``: every kb) narrow it."""
    try:
        wanted = Status(status)
    except ValueError:
        raise BadRequest(f"unknown status {status!r}; known: {', '.join(s.value for s in Status)}") from None
    where = [FactSubmission.status == wanted]
    if kb:
        where.append(FactSubmission.kb == kb)
    if kbs is not None:
        where.append(FactSubmission.kb.in_(sorted(kbs)))
    if predicate:
        where.append(FactSubmission.predicate == predicate)
    if source:
        where.append(FactSubmission.source == source)
    if batch_id:
        where.append(FactSubmission.batch_id == batch_id)
    with db.session() as session:
        total = session.scalar(select(func.count()).select_from(FactSubmission).where(*where)) or 0
        rows = session.scalars(
            select(FactSubmission).where(*where)
            .order_by(FactSubmission.created_at, FactSubmission.id).limit(limit).offset(offset)
        ).all()
        for row in rows:
            _ = row.checks
    return list(rows), total


def kb_of(*, db: Database, submission_id: str) -> str:
    """The kb a submission belongs to (it never changes)."""
    with db.session() as session:
        kb = session.scalar(select(FactSubmission.kb).where(FactSubmission.id == submission_id))
    if kb is None:
        raise NotFound(f"no submission {submission_id}")
    return kb


def decide(*, db: Database, submission_id: str, decision: str, reason: str, reviewer: str) -> Status:
    """Accept or keep both (→ ``reviewed``, then committed by a worker) or reject a submission
    waiting for review (:data:`DECISIONS`)."""
    if decision not in DECISIONS:
        raise BadRequest(f"unknown decision {decision!r}; one of {', '.join(DECISIONS)}")
    new_status = Status.rejected if decision == "reject" else Status.reviewed
    with db.session() as session:
        row = session.get(FactSubmission, submission_id)
        if row is None:
            raise NotFound(f"no submission {submission_id}")
        if row.status not in REVIEWABLE:
            raise Conflict(f"submission {submission_id} is {row.status.value}, not waiting for review")
        # the conditional update makes two reviewers deciding at once come out as one decision
        changed = session.execute(  # type: ignore[attr-defined]
            update(FactSubmission)
            .where(FactSubmission.id == submission_id, FactSubmission.status.in_(list(REVIEWABLE)))
            .values(status=new_status, verdict_reason=f"review: {decision}" + (f" ({reason})" if reason else ""))
        ).rowcount
        if not changed:
            raise Conflict(f"submission {submission_id} was decided concurrently")
        session.add(ReviewDecision(submission_id=submission_id, decision=decision, reason=reason, reviewer=reviewer))
        session.add(
            AuditEvent(actor=reviewer, action=f"review.{decision}", target=submission_id,
                       details={"reason": reason, "fact_id": row.fact_id, "kb": row.kb})
        )
    if new_status is Status.reviewed:
        from factloom.workers.tasks import enqueue_commit

        try:
            enqueue_commit([submission_id], 1)
        except Exception:  # stays 'reviewed' in the ledger; the sweeper commits it
            log.exception("could not enqueue the commit of %s; the sweeper will", submission_id)
    return new_status


def reopen(
    *, db: Database, store: Neo4jStore, submission_id: str, actor: str, reason: str = "",
    undo_within_s: float | None = None,
) -> Status:
    """Put a decided submission back in the review queue and the graph back as it was; returns the
    status it had.

    ``undo_within_s`` makes it a reviewer's undo: only of their own decision, only that many seconds
    after it. Without it (an admin's reopen) any decided submission may be reopened. The withdrawn
    decisions leave the decision table (so they no longer train the fusion) for the audit trail,
    which keeps them in full; a correction's new submission is withdrawn with them.
    """
    from factloom.workers.pipeline import retract_submissions

    with db.session() as session:
        row = session.get(FactSubmission, submission_id)
        if row is None:
            raise NotFound(f"no submission {submission_id}")
        if row.status not in DECIDED:
            raise Conflict(f"submission {submission_id} is {row.status.value}: there is no decision to take back")
        decisions = list(session.scalars(select(ReviewDecision).where(ReviewDecision.submission_id == submission_id)
                                         .order_by(ReviewDecision.created_at)))
        if undo_within_s is not None:
            last = decisions[-1] if decisions else None
            if last is None or last.reviewer != actor:
                raise Conflict("only the reviewer who decided can undo it; an admin can reopen it")
            if utcnow() - last.created_at > timedelta(seconds=undo_within_s):
                raise Conflict(f"the decision is older than {undo_within_s:g} s; an admin can reopen it")
        corrections = list(session.scalars(select(FactSubmission).where(
            FactSubmission.kb == row.kb, FactSubmission.key == f"c:{submission_id}",
            FactSubmission.status.in_(list(DECIDED)))))
        was = row.status
        fused = session.scalar(select(CheckResult.explanation).where(
            CheckResult.submission_id == submission_id, CheckResult.verifier == "fusion"))
        changed = session.execute(  # type: ignore[attr-defined]
            update(FactSubmission).where(FactSubmission.id == submission_id, FactSubmission.status == was)
            .values(status=Status.needs_review, verdict_reason=fused, committed_at=None)
        ).rowcount
        if not changed:
            raise Conflict(f"submission {submission_id} changed meanwhile; reload it")
        # what may have reached the graph: a rejected claim never did
        in_graph = [i for i, status in [(submission_id, was), *((c.id, c.status) for c in corrections)]
                    if status is not Status.rejected]
        for fixed in corrections:
            fixed.status = Status.rejected
            fixed.verdict_reason = f"review: correction of {submission_id} undone"
        withdrawn = [submission_id, *(c.id for c in corrections)]
        session.execute(delete(ReviewDecision).where(ReviewDecision.submission_id.in_(withdrawn)))
        session.add(AuditEvent(
            actor=actor, action="review.undo" if undo_within_s is not None else "review.reopen",
            target=submission_id, details={
                "was": was.value, "reason": reason, "kb": row.kb, "fact_id": row.fact_id,
                "decisions": [{"decision": d.decision, "reviewer": d.reviewer, "reason": d.reason,
                               "at": d.created_at.isoformat()} for d in decisions],
                "corrections": [c.id for c in corrections],
            }))
    # the graph last: a commit worker writing meanwhile sees the ledger's new state and retracts too
    if in_graph:
        retract_submissions(db, store, in_graph)
    return was
