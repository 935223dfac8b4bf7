"""Ingest batches for the operators' page: status counts per batch, throughput over the last hour, and
how the reviewers keep up (decisions per hour, agreement with the fusion, the queue's age)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import func, select

from factloom.ledger import Database, FactSubmission, IngestBatch, ReviewDecision, Status
from factloom.ledger.tables import DECISIONS_THAT_HOLD

__all__ = ["BatchRow", "Throughput", "list_batches", "throughput", "kb_counts", "knowledge_bases", "STATUS_ORDER",
           "ReviewerRow", "reviewers", "QueueAge", "queue_age"]

STATUS_ORDER = [s.value for s in (Status.pending, Status.checking, Status.needs_review, Status.accepted,
                                  Status.reviewed, Status.committed, Status.rejected)]
_OPEN = {"pending", "checking", "accepted", "reviewed"}


@dataclass(frozen=True, slots=True)
class BatchRow:
    id: str
    kb: str
    count: int
    created_at: datetime
    counts: dict[str, int]
    last_commit: datetime | None

    @property
    def done(self) -> bool:
        """Nothing left to check, commit or review."""
        return not any(self.counts.get(s, 0) for s in (*_OPEN, "needs_review"))

    @property
    def rate(self) -> float | None:
        """Committed facts per second from the batch's arrival to its last commit."""
        committed = self.counts.get("committed", 0)
        if not committed or self.last_commit is None:
            return None
        seconds = (self.last_commit - self.created_at).total_seconds()
        return committed / max(seconds, 0.001)


@dataclass(frozen=True, slots=True)
class Throughput:
    per_minute: list[int]  # committed facts per minute, oldest first, the last entry the current minute
    committed_last_hour: int
    status_totals: dict[str, int]

    @property
    def per_minute_avg(self) -> float:
        return self.committed_last_hour / max(len(self.per_minute), 1)


def list_batches(*, db: Database, kb: str = "", limit: int = 50, before: str = "") -> list[BatchRow]:
    """The newest batches (older than batch ``before`` when given) with their counts per status."""
    with db.session() as session:
        query = select(IngestBatch)
        if kb:
            query = query.where(IngestBatch.kb == kb)
        if before:
            anchor = session.get(IngestBatch, before)
            if anchor is not None:
                query = query.where((IngestBatch.created_at < anchor.created_at) | (
                    (IngestBatch.created_at == anchor.created_at) & (IngestBatch.id < anchor.id)))
        batches = list(session.scalars(query.order_by(IngestBatch.created_at.desc(), IngestBatch.id.desc())
                                       .limit(limit)))
        ids = [b.id for b in batches]
        counts: dict[str, dict[str, int]] = {i: {} for i in ids}
        last: dict[str, datetime | None] = {}
        if ids:
            rows = session.execute(
                select(FactSubmission.batch_id, FactSubmission.status, func.count(),
                       func.max(FactSubmission.committed_at))
                .where(FactSubmission.batch_id.in_(ids))
                .group_by(FactSubmission.batch_id, FactSubmission.status)
            )
            for batch_id, status, n, last_commit in rows:
                counts[batch_id][status.value] = int(n)
                if last_commit is not None:
                    last[batch_id] = last_commit
    return [BatchRow(b.id, b.kb, b.count, b.created_at, counts[b.id], last.get(b.id)) for b in batches]


def throughput(*, db: Database, kb: str = "", now: datetime | None = None, minutes: int = 60) -> Throughput:
    """Committed facts per minute over the last ``minutes`` and submissions per status, of one kb or all."""
    now = now or datetime.now(timezone.utc)
    start = now - timedelta(minutes=minutes)
    per_minute = [0] * minutes
    in_kb = [FactSubmission.kb == kb] if kb else []
    with db.session() as session:
        stamps = session.scalars(select(FactSubmission.committed_at)
                                 .where(FactSubmission.committed_at >= start, *in_kb))
        for stamp in stamps:
            if stamp is None:
                continue
            slot = int((stamp - start).total_seconds() // 60)
            per_minute[min(max(slot, 0), minutes - 1)] += 1
        totals = {s.value: int(n) for s, n in session.execute(
            select(FactSubmission.status, func.count()).where(*in_kb).group_by(FactSubmission.status))}
    return Throughput(per_minute=per_minute, committed_last_hour=sum(per_minute),
                      status_totals={s: totals.get(s, 0) for s in STATUS_ORDER})


@dataclass(frozen=True, slots=True)
class ReviewerRow:
    reviewer: str
    decisions: int
    hours: int  # distinct clock hours with a decision: the hours this reviewer worked
    agreeing: int  # decisions on the side the fusion leaned to (probability above 0.5: holds)
    judged: int  # decisions on items where the fusion leaned one way (a probability other than 0.5)

    @property
    def per_hour(self) -> float:
        return self.decisions / max(self.hours, 1)

    @property
    def agreement(self) -> float | None:
        return self.agreeing / self.judged if self.judged else None


def reviewers(*, db: Database, kb: str = "", now: datetime | None = None, days: int = 7) -> list[ReviewerRow]:
    """Per reviewer over the last ``days``: decisions, per working hour, and agreement with the fusion."""
    since = (now or datetime.now(timezone.utc)) - timedelta(days=days)
    in_kb = [FactSubmission.kb == kb] if kb else []
    stats: dict[str, dict[str, Any]] = {}
    with db.session() as session:
        # the window's decisions first (by time), then their items: a join the planner may start from
        # the kb's side reads every submission the kb ever had
        decided = session.execute(select(ReviewDecision.submission_id, ReviewDecision.reviewer,
                                         ReviewDecision.decision, ReviewDecision.created_at)
                                  .where(ReviewDecision.created_at >= since)).all()
        items: dict[str, float | None] = {}
        ids = sorted({d[0] for d in decided})
        for start in range(0, len(ids), 500):
            items.update(session.execute(
                select(FactSubmission.id, FactSubmission.probability)
                .where(FactSubmission.id.in_(ids[start:start + 500]), FactSubmission.key.not_like("c:%"), *in_kb)
            ).tuples().all())
        rows = [(reviewer, decision, at, items[sid]) for sid, reviewer, decision, at in decided if sid in items]
        for reviewer, decision, at, probability in rows:
            row = stats.setdefault(reviewer, {"n": 0, "hours": set(), "agree": 0, "judged": 0})
            row["n"] += 1
            row["hours"].add(at.replace(minute=0, second=0, microsecond=0))
            if probability is not None and probability != 0.5:  # at 0.5 the fusion leaned neither way
                row["judged"] += 1
                row["agree"] += (decision in DECISIONS_THAT_HOLD) == (probability > 0.5)
    return sorted((ReviewerRow(r, v["n"], len(v["hours"]), v["agree"], v["judged"]) for r, v in stats.items()),
                  key=lambda r: -r.decisions)


@dataclass(frozen=True, slots=True)
class QueueAge:
    waiting: int
    oldest: datetime | None
    median: datetime | None  # half the waiting items arrived before this


def queue_age(*, db: Database, kb: str = "") -> QueueAge:
    where = [FactSubmission.status == Status.needs_review, *([FactSubmission.kb == kb] if kb else [])]
    with db.session() as session:
        waiting = session.scalar(select(func.count()).select_from(FactSubmission).where(*where)) or 0
        oldest = session.scalar(select(func.min(FactSubmission.created_at)).where(*where))
        median = session.scalar(select(FactSubmission.created_at).where(*where)
                                .order_by(FactSubmission.created_at).offset(waiting // 2).limit(1)) if waiting else None
    return QueueAge(waiting, oldest, median)


def kb_counts(*, db: Database) -> dict[str, dict[Status, int]]:
    """kb → status → submissions, for every kb that has any."""
    with db.session() as session:
        rows = session.execute(select(FactSubmission.kb, FactSubmission.status, func.count())
                               .group_by(FactSubmission.kb, FactSubmission.status)).all()
    counts: dict[str, dict[Status, int]] = {}
    for kb, status, n in rows:
        counts.setdefault(kb, {})[status] = n
    return counts


def knowledge_bases(*, db: Database) -> list[str]:
    with db.session() as session:
        return sorted(session.scalars(select(IngestBatch.kb).distinct()))
