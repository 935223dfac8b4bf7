"""One review item as a reviewer sees it, and the decisions a reviewer can take on it.

Accept and reject go through :func:`factloom.platform.review.service.decide`, the same path as
``POST /v1/review``; a correction rejects the claim as submitted and records the corrected claim as
a new submission that is accepted in the same transaction, then committed by a worker.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError
from sqlalchemy import or_, select

from factloom.graph import Neo4jStore, StoredFact, fact_id_for
from factloom.graph.explore import Neighbourhood, neighbourhood
from factloom.ledger import AuditEvent, CheckResult, Database, FactSubmission, ReviewDecision, Status
from factloom.ledger.tables import Decision, new_id
from factloom.platform.errors import BadRequest, Conflict, NotFound, found
from factloom.platform.ingest.schemas import FactIn
from factloom.platform.review import service as review

__all__ = ["Check", "Conflicting", "HistoryEvent", "Item", "load_item", "conflicts", "item_graph", "decide",
           "correct", "bulk_decide", "keep_one", "undo_between", "BulkResult", "FUSION"]

log = logging.getLogger(__name__)
FUSION = "fusion"
MAX_BULK = 200


@dataclass(frozen=True, slots=True)
class Check:
    verifier: str
    probability: float | None
    score: float | None
    explanation: str
    details: dict[str, Any]
    model_version: str | None


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    at: datetime
    what: str
    actor: str
    detail: str = ""


@dataclass(slots=True)
class Item:
    row: FactSubmission
    checks: list[Check]
    fusion: Check | None
    history: list[HistoryEvent]
    corrections: list[str] = field(default_factory=list)

    @property
    def open(self) -> bool:
        return self.row.status is Status.needs_review

    @property
    def conflicting_ids(self) -> list[str]:
        out: list[str] = []
        for check in self.checks:
            ids = check.details.get("fact_ids") if check.details.get("rule") == "functional" else None
            out.extend(str(i) for i in ids or [])
        return out


@dataclass(frozen=True, slots=True)
class Conflicting:
    fact: StoredFact
    conflicts: bool


def load_item(*, db: Database, submission_id: str) -> Item:
    with db.session() as session:
        row = found(session.get(FactSubmission, submission_id), f"submission {submission_id}")
        checks = [
            Check(c.verifier, c.probability, c.score, c.explanation or "", dict(c.details or {}), c.model_version)
            for c in session.scalars(select(CheckResult).where(CheckResult.submission_id == submission_id)
                                     .order_by(CheckResult.verifier))
        ]
        decisions = list(session.scalars(select(ReviewDecision).where(ReviewDecision.submission_id == submission_id)
                                         .order_by(ReviewDecision.created_at)))
        audits = list(session.scalars(
            select(AuditEvent).where(or_(AuditEvent.target == submission_id,
                                         AuditEvent.target == f"submission:{submission_id}"))
            .order_by(AuditEvent.created_at)
        ))
        checked_at = session.scalar(select(CheckResult.created_at).where(
            CheckResult.submission_id == submission_id, CheckResult.verifier == FUSION))
        corrections = list(session.scalars(select(FactSubmission.id).where(
            FactSubmission.kb == row.kb, FactSubmission.key == f"c:{submission_id}")))
    history = [HistoryEvent(row.created_at, "submitted", row.source or "no source", f"batch {row.batch_id[:8]}")]
    if checked_at is not None:
        fused = next((c for c in checks if c.verifier == FUSION), None)
        verdict = str(fused.details.get("verdict", "")) if fused else ""
        history.append(HistoryEvent(checked_at, "checked", "check worker",
                                    f"verdict {verdict or '?'}" + (f": {fused.explanation}" if fused else "")))
    for d in decisions:
        history.append(HistoryEvent(d.created_at, f"decision: {d.decision}", d.reviewer, d.reason))
    for a in audits:
        details = a.details or {}
        if a.action in ("review.undo", "review.reopen"):  # the withdrawn decisions live on only here
            withdrawn = "; ".join(f"withdrew {d.get('decision')} by {d.get('reviewer')}" + (
                f" ({d['reason']})" if d.get("reason") else "") for d in details.get("decisions") or [])
            history.append(HistoryEvent(a.created_at, a.action, a.actor, "; ".join(
                part for part in (f"was {details.get('was')}", withdrawn, details.get("reason")) if part)))
            continue
        if a.action.startswith("review.") and a.action != "review.correct":
            continue  # the decision row above says the same
        history.append(HistoryEvent(a.created_at, a.action, a.actor,
                                    ", ".join(f"{k}: {v}" for k, v in details.items() if v not in (None, ""))))
    if row.committed_at is not None:
        history.append(HistoryEvent(row.committed_at, "committed to the graph", "commit worker", row.fact_id))
    history.sort(key=lambda e: e.at.replace(tzinfo=None) if e.at.tzinfo else e.at)
    return Item(row=row, checks=[c for c in checks if c.verifier != FUSION],
                fusion=next((c for c in checks if c.verifier == FUSION), None), history=history,
                corrections=corrections)


def conflicts(*, store: Neo4jStore, item: Item, functional: Sequence[str]) -> list[Conflicting]:
    """The graph's current values of the claim's (subject, predicate), and the facts a verifier cited."""
    row = item.row
    current = store.current_facts(row.kb, [(row.subject, row.predicate)]).get((row.subject, row.predicate), [])
    cited = set(item.conflicting_ids)
    seen = {f.fact_id for f in current}
    extra = [f for f in store.facts_by_id(row.kb, sorted(cited - seen))] if cited - seen else []
    out = []
    for fact in [*current, *extra]:
        if fact.fact_id == row.fact_id:
            continue
        differs = fact.predicate == row.predicate and fact.object.casefold() != row.object.casefold()
        out.append(Conflicting(fact, fact.fact_id in cited or (differs and row.predicate in functional)))
    return out


def item_graph(*, store: Neo4jStore, item: Item, per_node: int = 25) -> tuple[Neighbourhood, dict[str, str]]:
    """The one-hop neighbourhood of the claim's subject and object (those already in the graph)."""
    row = item.row
    ids = store.resolve(row.kb, [row.subject, row.object])
    graph = neighbourhood(store, kb=row.kb, entity_ids=list(ids.values()), per_node=per_node, limit=200)
    return graph, ids


def decide(
    *, db: Database, submission_id: str, decision: str, reason: str, actor: str,
    second_opinion_kbs: Collection[str] = (), settles: bool = False, store: Neo4jStore | None = None,
) -> Status:
    return review.decide(db=db, submission_id=submission_id, decision=decision, reason=reason.strip()[:2000],
                         reviewer=actor, second_opinion_kbs=second_opinion_kbs, settles=settles, store=store)


def correct(
    *, db: Database, submission_id: str, subject: str, predicate: str, obj: str, reason: str, actor: str,
) -> str:
    """Reject the claim as submitted and accept its corrected form; returns the new submission's id.
    The corrected claim obeys the API's rules for a fact (:class:`FactIn`: names of 1 to 1000 characters…)."""
    reason = reason.strip()[:2000]
    with db.session() as session:
        row = found(session.get(FactSubmission, submission_id), f"submission {submission_id}")
        try:
            fact = FactIn(subject=subject, predicate=predicate, object=obj, source=row.source,
                          valid_from=row.valid_from, valid_to=row.valid_to)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise BadRequest(f"corrected {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        if (fact.subject, fact.predicate, fact.object) == (row.subject, row.predicate, row.object):
            raise BadRequest("the corrected claim is the same as the submitted one; accept it instead")
        if row.status is not Status.needs_review:
            raise Conflict(f"submission {submission_id} is {row.status.value}, not waiting for review")
        review.move(session, submission_id, [Status.needs_review], status=Status.rejected,
                    verdict_reason="review: corrected" + (f" ({reason})" if reason else ""))
        fixed = FactSubmission(
            id=new_id(), batch_id=row.batch_id, kb=row.kb, key=f"c:{submission_id}",
            fact_id=fact_id_for(row.kb, fact.subject, fact.predicate, fact.object),
            subject=fact.subject, predicate=fact.predicate, object=fact.object, source=row.source,
            valid_from=row.valid_from, valid_to=row.valid_to, evidence=row.evidence, status=Status.reviewed,
            probability=None, verdict_reason=f"review: corrected from {submission_id}",
        )
        session.add(fixed)
        note = f"corrected to {fact.subject} · {fact.predicate} · {fact.object}" + (f"; {reason}" if reason else "")
        session.add(ReviewDecision(submission_id=submission_id, decision=Decision.reject.value, reason=note,
                                   reviewer=actor))
        session.add(ReviewDecision(submission_id=fixed.id, decision=Decision.accept.value,
                                   reason=f"correction of {submission_id}" + (f"; {reason}" if reason else ""),
                                   reviewer=actor))
        session.add(AuditEvent(actor=actor, action="review.correct", target=submission_id, details={
            "corrected_id": fixed.id, "from": [row.subject, row.predicate, row.object],
            "to": [fact.subject, fact.predicate, fact.object], "reason": reason, "kb": row.kb,
        }))
        new = fixed.id
    _commit_later(new)
    return new


def _commit_later(submission_id: str) -> None:
    from factloom.workers.tasks import enqueue_commit

    try:
        enqueue_commit([submission_id], 1)
    except Exception:  # stays 'reviewed' in the ledger; the sweeper commits it
        log.exception("could not enqueue the commit of %s; the sweeper will", submission_id)


@dataclass(frozen=True, slots=True)
class BulkResult:
    done: list[str]
    skipped: list[str]  # decided by someone else meanwhile, or gone


def bulk_decide(
    *, db: Database, ids: Sequence[str], decision: str, reason: str, actor: str,
    second_opinion_kbs: Collection[str] = (), settles: bool = False, store: Neo4jStore | None = None,
) -> BulkResult:
    """Decide each selected submission; the ones no longer waiting are skipped, not failed."""
    ids = list(dict.fromkeys(i for i in ids if i))
    if not ids:
        raise BadRequest("select at least one item")
    if len(ids) > MAX_BULK:
        raise BadRequest(f"at most {MAX_BULK} items at once; this selection has {len(ids)}")
    done, skipped = [], []
    for submission_id in ids:
        try:
            decide(db=db, submission_id=submission_id, decision=decision, reason=reason, actor=actor,
                   second_opinion_kbs=second_opinion_kbs, settles=settles, store=store)
            done.append(submission_id)
        except (Conflict, NotFound):
            skipped.append(submission_id)
    return BulkResult(done=done, skipped=skipped)


def keep_one(
    *, db: Database, keep: str, rivals: Sequence[str], actor: str, second_opinion_kbs: Collection[str] = (),
    settles: bool = False, store: Neo4jStore | None = None,
) -> BulkResult:
    """Accept ``keep`` and reject its rival values still waiting: one (subject, predicate) decided at once."""
    decide(db=db, submission_id=keep, decision=Decision.accept.value, reason="kept among rival values", actor=actor,
           second_opinion_kbs=second_opinion_kbs, settles=settles, store=store)
    others = [i for i in dict.fromkeys(rivals) if i and i != keep]
    if len(others) > MAX_BULK:
        raise BadRequest(f"at most {MAX_BULK} rivals at once; this group has {len(others)}")
    return BulkResult(done=[keep], skipped=[]) if not others else bulk_decide(
        db=db, ids=others, decision=Decision.reject.value, reason=f"a rival value ({keep[:8]}) was kept", actor=actor,
        second_opinion_kbs=second_opinion_kbs, settles=settles, store=store)


def undo_between(*, db: Database, store: Neo4jStore, actor: str, start: float, end: float,
                 within_s: float) -> BulkResult:
    """Undo the decisions ``actor`` took between the UNIX times ``start`` and ``end`` (one click's).

    The decisions' times are stamped by this process's clock, inside that window; the 10 ms margin
    only absorbs the float round trip through the form."""
    since, until = (datetime.fromtimestamp(t, timezone.utc) for t in (start - 0.01, end + 0.01))
    with db.session() as session:
        ids = list(dict.fromkeys(session.scalars(
            select(ReviewDecision.submission_id).join(FactSubmission, FactSubmission.id == ReviewDecision.submission_id)
            .where(ReviewDecision.reviewer == actor, ReviewDecision.created_at >= since,
                   ReviewDecision.created_at <= until, FactSubmission.key.not_like("c:%"))  # corrections go with theirs
            .order_by(ReviewDecision.created_at))))
    done, skipped = [], []
    for submission_id in ids:
        try:
            review.reopen(db=db, store=store, submission_id=submission_id, actor=actor, undo_within_s=within_s)
            done.append(submission_id)
        except (Conflict, NotFound):
            skipped.append(submission_id)
    return BulkResult(done=done, skipped=skipped)


def selected_rows(*, db: Database, ids: Sequence[str]) -> list[FactSubmission]:
    with db.session() as session:
        return list(session.scalars(select(FactSubmission).where(FactSubmission.id.in_(list(ids)[:MAX_BULK]))
                                    .order_by(FactSubmission.created_at)))
