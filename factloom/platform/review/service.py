"""Review: list what the checkers could not decide; record, audit and carry out decisions."""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from factloom.graph import GraphUnavailable, Neo4jStore
from factloom.ledger import AuditEvent, CheckResult, Database, FactSubmission, ReviewDecision, Status
from factloom.ledger.tables import Decision, utcnow
from factloom.platform.errors import BadRequest, Conflict, found
from factloom.verify.reasons import review_reason

__all__ = ["list_submissions", "kb_of", "decide", "reopen", "move", "DECISIONS", "DECIDED", "SECOND_OPINION",
           "DISAGREEMENT"]

log = logging.getLogger(__name__)

REVIEWABLE = frozenset({Status.needs_review})
# accept: the claim holds (a new value of a functional predicate replaces the current one);
# keep_both: it holds beside the current value (two same-name entities, or a predicate that is not
# functional for this subject); reject: it never reaches the graph
DECISIONS = tuple(d.value for d in Decision)
# what an item of a kb that needs two opinions waits for (``review_reason``, factloom.verify.reasons)
SECOND_OPINION, DISAGREEMENT = "second_opinion", "disagreement"
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
    return found(kb, f"submission {submission_id}")


def decide(
    *, db: Database, submission_id: str, decision: str, reason: str, reviewer: str,
    second_opinion_kbs: Collection[str] = (), settles: bool = False, store: Neo4jStore | None = None,
) -> Status:
    """Accept or keep both (→ ``reviewed``, then committed by a worker) or reject a submission
    waiting for review (:data:`DECISIONS`); returns its new status.

    In ``second_opinion_kbs`` (whose items need two reviewers) the first reviewer's decision is
    recorded and the item keeps waiting; a second reviewer's agreeing decision carries it out, a
    differing one marks it ``disagreement`` for an admin, whose decision (``settles``) is final.

    An item whose fact is in the graph already (an automatic accept the blind audit sent back to
    review, ``committed_at`` set) stays there until decided: a reject takes it out — at once through
    ``store`` when given, else by a worker's retract task — and restores what it superseded; an accept
    writes it again (idempotent).
    """
    if decision not in DECISIONS:
        raise BadRequest(f"unknown decision {decision!r}; one of {', '.join(DECISIONS)}")
    new_status = Status.rejected if decision == Decision.reject.value else Status.reviewed
    with db.session() as session:
        row = found(session.get(FactSubmission, submission_id), f"submission {submission_id}")
        if row.status not in REVIEWABLE:
            raise Conflict(f"submission {submission_id} is {row.status.value}, not waiting for review")
        given = list(session.scalars(select(ReviewDecision).where(ReviewDecision.submission_id == submission_id)))
        outcome = _opinion_outcome(row, given, decision, reviewer, 2 if row.kb in second_opinion_kbs else 1, settles)
        if outcome is not None:  # an opinion recorded; the item keeps waiting
            # two reviewers giving opinions at once come out in order
            move(session, submission_id, REVIEWABLE, unchanged_since=row.updated_at, updated_at=utcnow(),
                 review_reason=outcome)
            session.add(ReviewDecision(submission_id=submission_id, decision=decision, reason=reason,
                                       reviewer=reviewer))
            session.add(AuditEvent(actor=reviewer, action="review.opinion", target=submission_id,
                                   details={"decision": decision, "reason": reason, "kb": row.kb,
                                            "outcome": outcome}))
            return Status.needs_review
        in_graph = row.committed_at is not None and new_status is Status.rejected
        move(session, submission_id, REVIEWABLE, status=new_status,
             verdict_reason=f"review: {decision}" + (f" ({reason})" if reason else ""),
             **({"committed_at": None} if in_graph else {}))
        session.add(ReviewDecision(submission_id=submission_id, decision=decision, reason=reason, reviewer=reviewer))
        session.add(
            AuditEvent(actor=reviewer, action=f"review.{decision}", target=submission_id,
                       details={"reason": reason, "fact_id": row.fact_id, "kb": row.kb})
        )
    if in_graph:
        _retract(db, store, submission_id)
    if new_status is Status.reviewed:
        from factloom.workers.tasks import enqueue_commit

        try:
            enqueue_commit([submission_id], 1)
        except Exception:  # stays 'reviewed' in the ledger; the sweeper commits it
            log.exception("could not enqueue the commit of %s; the sweeper will", submission_id)
    return new_status


def _retract(db: Database, store: Neo4jStore | None, submission_id: str) -> None:
    """Take a rejected item's fact back out of the graph (the ledger says rejected already)."""
    from factloom.workers.pipeline import retract_submissions

    if store is not None:
        try:
            retract_submissions(db, store, [submission_id])
            return
        except GraphUnavailable:  # the ledger has moved: a worker retracts once Neo4j answers again
            log.warning("Neo4j unavailable while rejecting %s; a worker will retract its fact", submission_id)
    from factloom.workers.tasks import enqueue_retract

    try:
        enqueue_retract([submission_id])
    except Exception:
        log.exception("could not enqueue the retraction of %s", submission_id)


def move(
    session: Session, submission_id: str, allowed: Collection[Status], *, unchanged_since: datetime | None = None,
    **values: Any,
) -> None:
    """Write ``values`` to the submission if its status is still one of ``allowed`` (and, given
    ``unchanged_since``, nothing touched it since): the one guard that makes two people deciding at
    once come out as one decision, whatever page or API they decide from. :class:`Conflict` otherwise."""
    where = [FactSubmission.id == submission_id, FactSubmission.status.in_(list(allowed))]
    if unchanged_since is not None:
        where.append(FactSubmission.updated_at == unchanged_since)
    changed = session.execute(update(FactSubmission).where(*where).values(**values)).rowcount  # type: ignore[attr-defined]
    if not changed:
        raise Conflict(f"submission {submission_id} was decided by someone else meanwhile; reload it")


def _withdraw_opinion(session: Session, row: FactSubmission, opinion: ReviewDecision, actor: str) -> None:
    others = session.scalars(select(ReviewDecision).where(ReviewDecision.submission_id == row.id,
                                                          ReviewDecision.id != opinion.id)).all()
    checks = session.scalars(select(CheckResult).where(CheckResult.submission_id == row.id)).all()
    row.review_reason = SECOND_OPINION if others else review_reason(checks)
    session.delete(opinion)
    session.add(AuditEvent(actor=actor, action="review.undo", target=row.id, details={
        "was": "needs_review", "kb": row.kb, "fact_id": row.fact_id, "reason": "",
        "decisions": [{"decision": opinion.decision, "reviewer": opinion.reviewer, "reason": opinion.reason,
                       "at": opinion.created_at.isoformat()}], "corrections": []}))


def _opinion_outcome(
    row: FactSubmission, given: list[ReviewDecision], decision: str, reviewer: str, opinions: int, settles: bool,
) -> str | None:
    """``None`` when this decision is carried out; else what the item waits for after it is recorded:
    ``second_opinion`` (a first opinion) or ``disagreement`` (two that differ: an admin settles it)."""
    if settles or opinions < 2:
        if row.review_reason == DISAGREEMENT and not settles:
            raise Conflict("the reviewers disagree on this item; an admin decides it")
        return None
    if row.review_reason == DISAGREEMENT:
        raise Conflict("the reviewers disagree on this item; an admin decides it")
    if any(d.reviewer == reviewer for d in given):
        raise Conflict("you gave your opinion on this item already; a second reviewer decides it")
    if not given:
        return SECOND_OPINION
    return None if given[-1].decision == decision else DISAGREEMENT


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
        row = found(session.get(FactSubmission, submission_id), f"submission {submission_id}")
        decisions = list(session.scalars(select(ReviewDecision).where(ReviewDecision.submission_id == submission_id)
                                         .order_by(ReviewDecision.created_at)))
        if undo_within_s is not None:
            last = decisions[-1] if decisions else None
            if last is None or last.reviewer != actor:
                raise Conflict("only the reviewer who decided can undo it; an admin can reopen it")
            if utcnow() - last.created_at > timedelta(seconds=undo_within_s):
                raise Conflict(f"the decision is older than {undo_within_s:g} s; an admin can reopen it")
            if row.status in REVIEWABLE:  # an opinion that waits for a second one: only it is withdrawn
                _withdraw_opinion(session, row, last, actor)
                return row.status
        if row.status not in DECIDED:
            raise Conflict(f"submission {submission_id} is {row.status.value}: there is no decision to take back")
        corrections = list(session.scalars(select(FactSubmission).where(
            FactSubmission.kb == row.kb, FactSubmission.key == f"c:{submission_id}",
            FactSubmission.status.in_(list(DECIDED)))))
        was = row.status
        fused = session.scalar(select(CheckResult.explanation).where(
            CheckResult.submission_id == submission_id, CheckResult.verifier == "fusion"))
        move(session, submission_id, [was], status=Status.needs_review, verdict_reason=fused, committed_at=None)
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
        try:
            retract_submissions(db, store, in_graph)
        except GraphUnavailable:  # the ledger has moved: a worker retracts once Neo4j answers again
            from factloom.workers.tasks import enqueue_retract

            log.warning("Neo4j unavailable while reopening %s; a worker will retract its fact", submission_id)
            enqueue_retract(in_graph)
    return was
