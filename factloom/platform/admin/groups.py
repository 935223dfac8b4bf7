"""The review queue in groups: how many items wait for each reason, and the (subject, predicate)
pairs with rival values waiting, to be decided together. Same filters as the queue's pages."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import and_, func, or_, select

from factloom.ledger import Database, FactSubmission
from factloom.platform.admin.queue import QueueFilters, conditions
from factloom.verify.reasons import REVIEW_REASONS

__all__ = ["ReasonGroup", "ClaimGroup", "reason_groups", "claim_groups"]


@dataclass(frozen=True, slots=True)
class ReasonGroup:
    reason: str
    waiting: int

    @property
    def text(self) -> str:
        return REVIEW_REASONS.get(self.reason, "not recorded")


@dataclass(frozen=True, slots=True)
class ClaimGroup:
    """Rival values of one (subject, predicate) waiting together, decided together."""

    kb: str
    subject: str
    predicate: str
    waiting: int
    values: list[tuple[str, str]]  # (submission id, object), oldest first, at most ten


def reason_groups(*, db: Database, filters: QueueFilters, now: datetime | None = None) -> list[ReasonGroup]:
    """How many waiting items (under the filters) each reason has, the largest group first."""
    where = conditions(filters, now or datetime.now(timezone.utc))
    n = func.count().label("n")
    with db.session() as session:
        rows = session.execute(select(FactSubmission.review_reason, n).where(*where)
                               .group_by(FactSubmission.review_reason).order_by(n.desc(), FactSubmission.review_reason))
        return [ReasonGroup(reason or "", int(count)) for reason, count in rows]


def claim_groups(
    *, db: Database, filters: QueueFilters, limit: int = 50, now: datetime | None = None,
) -> tuple[list[ClaimGroup], int]:
    """The (subject, predicate) pairs with two or more waiting values (under the filters), the most
    contested first, and how many such pairs there are."""
    where = conditions(filters, now or datetime.now(timezone.utc))
    n = func.count().label("n")
    # one grouping pass: the window count over the groups kept says how many there are in all
    pairs = (select(FactSubmission.kb, FactSubmission.subject, FactSubmission.predicate, n,
                    func.count().over().label("pairs")).where(*where)
             .group_by(FactSubmission.kb, FactSubmission.subject, FactSubmission.predicate).having(func.count() > 1)
             .order_by(n.desc(), FactSubmission.subject).limit(limit))
    with db.session() as session:
        found = session.execute(pairs).all()
        total = int(found[0][4]) if found else 0
        top = [(kb, subject, predicate, int(count)) for kb, subject, predicate, count, _ in found]
        values: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
        if top:
            rivals = or_(*[and_(FactSubmission.kb == kb, FactSubmission.subject == subject,
                                FactSubmission.predicate == predicate) for kb, subject, predicate, _ in top])
            for kb, subject, predicate, sid, obj in session.execute(
                    select(FactSubmission.kb, FactSubmission.subject, FactSubmission.predicate, FactSubmission.id,
                           FactSubmission.object).where(*where, rivals).order_by(FactSubmission.created_at)):
                values.setdefault((kb, subject, predicate), []).append((sid, obj))
    groups = [ClaimGroup(kb, subject, predicate, count, values.get((kb, subject, predicate), [])[:10])
              for kb, subject, predicate, count in top]
    return groups, total
