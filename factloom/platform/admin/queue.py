"""The review queue: filters, sort orders and keyset pages over the ``needs_review`` submissions.

Pages are keyset pages (a cursor holds the sort value and the id of the last row shown), not
``OFFSET`` pages, so page 200 of a 10,000-item queue costs what page 1 does; the orders are backed by
the ``(status, created_at, id)`` and ``(status, probability, id)`` indexes of migration 0002.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from factloom.ledger import CheckResult, Database, FactSubmission, ReviewDecision, Status
from factloom.ledger.tables import as_utc
from factloom.verify.reasons import REVIEW_REASONS

__all__ = [
    "SORTS", "AGES", "QueueFilters", "QueueRow", "QueuePage", "QueueCounts", "parse_filters",
    "encode_cursor", "decode_cursor", "list_queue", "queue_counts", "neighbours", "facets", "GROUPS", "conditions",
]

SORTS: dict[str, str] = {
    "oldest": "Oldest first", "newest": "Newest first",
    "p_asc": "Least likely first", "p_desc": "Most likely first",
}
AGES: dict[str, str] = {
    "any": "Any age", "1h": "Last hour", "24h": "Last 24 hours", "1d+": "Older than a day", "7d+": "Older than a week",
}
_AGE_DELTAS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "1d+": timedelta(days=1),
               "7d+": timedelta(days=7)}
GROUPS: dict[str, str] = {"": "No grouping", "reason": "Why it waits", "claim": "Rival values"}
MAX_PAGE = 200


@dataclass(frozen=True, slots=True)
class QueueFilters:
    """What a reviewer narrowed the queue to; every field is optional."""

    kb: str = ""
    predicate: str = ""
    source: str = ""
    batch: str = ""
    p_min: float | None = None
    p_max: float | None = None
    age: str = "any"
    sort: str = "oldest"
    reason: str = ""  # a key of REVIEW_REASONS
    search: str = ""  # part of the subject's or the object's name, any case
    subject: str = ""  # exactly this subject (a group of rival values)
    group: str = ""  # a key of GROUPS

    def params(self, **extra: str) -> dict[str, str]:
        """The non-default fields as query parameters, changed by ``extra``, for links that keep them."""
        out = {k: v for k, v in (
            ("kb", self.kb), ("predicate", self.predicate), ("source", self.source), ("batch", self.batch),
            ("p_min", "" if self.p_min is None else f"{self.p_min:g}"),
            ("p_max", "" if self.p_max is None else f"{self.p_max:g}"),
            ("age", "" if self.age == "any" else self.age), ("sort", "" if self.sort == "oldest" else self.sort),
            ("reason", self.reason), ("q", self.search), ("subject", self.subject), ("group", self.group),
        ) if v}
        for k, v in extra.items():  # an empty value drops the field: a link that widens the view
            if v:
                out[k] = v
            else:
                out.pop(k, None)
        return out

    def query(self, **extra: str) -> str:
        return urlencode(self.params(**extra))

    @property
    def active(self) -> bool:
        return bool({k for k in self.params() if k not in ("sort", "group")})


def _probability(raw: str, label: str, errors: list[str]) -> float | None:
    if not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        errors.append(f"{label} must be a number between 0 and 1, not {raw!r}")
        return None
    if not 0.0 <= value <= 1.0:
        errors.append(f"{label} must lie between 0 and 1, not {value:g}")
        return None
    return value


def _choice(params: Mapping[str, str], name: str, known: Mapping[str, str], default: str, instead: str,
            errors: list[str]) -> str:
    value = params.get(name) or default
    if value == default or value in known:
        return value
    errors.append(f"unknown {name} {value!r}; {instead}")
    return default


def parse_filters(params: Mapping[str, str]) -> tuple[QueueFilters, list[str]]:
    """Filters from query parameters; what cannot be used is dropped and explained in the errors."""
    errors: list[str] = []
    p_min = _probability(params.get("p_min", ""), "'probability from'", errors)
    p_max = _probability(params.get("p_max", ""), "'probability to'", errors)
    if p_min is not None and p_max is not None and p_min > p_max:
        errors.append(f"'probability from' ({p_min:g}) is above 'probability to' ({p_max:g}); swapped them")
        p_min, p_max = p_max, p_min
    age = _choice(params, "age", AGES, "any", "showing any age", errors)
    sort = _choice(params, "sort", SORTS, "oldest", "showing oldest first", errors)
    reason = _choice(params, "reason", REVIEW_REASONS, "", "showing every reason", errors)
    group = _choice(params, "group", GROUPS, "", "not grouped", errors)
    filters = QueueFilters(
        kb=params.get("kb", "").strip()[:64], predicate=params.get("predicate", "").strip()[:200],
        source=params.get("source", "").strip()[:1000], batch=params.get("batch", "").strip()[:32],
        p_min=p_min, p_max=p_max, age=age, sort=sort, reason=reason, search=params.get("q", "").strip()[:200],
        subject=params.get("subject", "").strip()[:1000], group=group,
    )
    return filters, errors


# ---------------------------------------------------------------- cursors

def encode_cursor(sort: str, value: Any, row_id: str) -> str:
    raw = json.dumps([sort, value.isoformat() if isinstance(value, datetime) else value, row_id])
    return base64.urlsafe_b64encode(raw.encode()).rstrip(b"=").decode()


def decode_cursor(text: str, sort: str) -> tuple[Any, str] | None:
    """(sort value, id) of a cursor made for ``sort``; ``None`` for a malformed or foreign one."""
    try:
        kind, value, row_id = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, TypeError, binascii.Error):
        return None
    if kind != sort or not isinstance(row_id, str):
        return None
    if sort in ("oldest", "newest"):
        try:
            return as_utc(datetime.fromisoformat(value)), row_id
        except (TypeError, ValueError):
            return None
    return (float(value), row_id) if isinstance(value, int | float) else None


# ---------------------------------------------------------------- rows and pages

@dataclass(frozen=True, slots=True)
class QueueRow:
    id: str
    kb: str
    subject: str
    predicate: str
    object: str
    source: str | None
    batch_id: str
    probability: float | None
    reason: str | None
    created_at: datetime
    why: str | None = None  # a key of REVIEW_REASONS
    verifiers: list[tuple[str, float | None]] = field(default_factory=list)

    @property
    def why_text(self) -> str:
        return REVIEW_REASONS.get(self.why or "", "not recorded")


@dataclass(frozen=True, slots=True)
class QueuePage:
    rows: list[QueueRow]
    next_cursor: str | None
    prev_cursor: str | None
    matching: int
    first: int = 0  # the 1-based position of the first row shown in the filters' order (0: none shown)

    @property
    def position(self) -> str:
        """"51–100 of 885"."""
        if not self.rows:
            return f"0 of {self.matching}"
        return f"{self.first}–{self.first + len(self.rows) - 1} of {self.matching}"


@dataclass(frozen=True, slots=True)
class QueueCounts:
    waiting: int
    awaiting_commit: int
    decided_today: int
    decided_today_by_me: int


def _sort_value(sort: str) -> ColumnElement[Any]:
    if sort in ("oldest", "newest"):
        return FactSubmission.created_at  # type: ignore[return-value]
    # abstained-everywhere rows have no probability: they sort as the least likely
    return func.coalesce(FactSubmission.probability, -1.0)


def conditions(filters: QueueFilters, now: datetime) -> list[ColumnElement[bool]]:
    """The SQL conditions of the waiting items the filters match."""
    where: list[ColumnElement[bool]] = [FactSubmission.status == Status.needs_review]
    if filters.kb:
        where.append(FactSubmission.kb == filters.kb)
    if filters.predicate:
        where.append(FactSubmission.predicate == filters.predicate)
    if filters.source:
        where.append(FactSubmission.source == filters.source)
    if filters.batch:
        where.append(FactSubmission.batch_id == filters.batch)
    if filters.p_min is not None:
        where.append(FactSubmission.probability >= filters.p_min)
    if filters.p_max is not None:
        where.append(FactSubmission.probability <= filters.p_max)
    if filters.reason:
        where.append(FactSubmission.review_reason == filters.reason)
    if filters.subject:
        where.append(FactSubmission.subject == filters.subject)
    if filters.search:
        pattern = "%" + filters.search.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        where.append(or_(func.lower(FactSubmission.subject).like(pattern, escape="\\"),
                         func.lower(FactSubmission.object).like(pattern, escape="\\")))
    if filters.age in _AGE_DELTAS:
        cutoff = now - _AGE_DELTAS[filters.age]
        where.append(FactSubmission.created_at >= cutoff if filters.age in ("1h", "24h")
                     else FactSubmission.created_at < cutoff)
    return where


def _after(sort: str, value: Any, row_id: str, forward: bool) -> ColumnElement[bool]:
    """Rows strictly after (or, going back, before) the cursor in the order of ``sort``."""
    col = _sort_value(sort)
    ascending = sort in ("oldest", "p_asc")
    later = ascending == forward
    if later:
        return or_(col > value, and_(col == value, FactSubmission.id > row_id))
    return or_(col < value, and_(col == value, FactSubmission.id < row_id))


def _ordered(sort: str, forward: bool) -> list[Any]:
    col = _sort_value(sort)
    ascending = (sort in ("oldest", "p_asc")) == forward
    return [col.asc(), FactSubmission.id.asc()] if ascending else [col.desc(), FactSubmission.id.desc()]


def _sort_key(sort: str, row: FactSubmission) -> Any:
    if sort in ("oldest", "newest"):
        return row.created_at
    return -1.0 if row.probability is None else row.probability


def _cursor_of(sort: str, row: FactSubmission) -> str:
    return encode_cursor(sort, _sort_key(sort, row), row.id)


def list_queue(
    *, db: Database, filters: QueueFilters, limit: int, after: str | None = None, before: str | None = None,
    now: datetime | None = None,
) -> QueuePage:
    """One page of the queue in the filters' order, after the cursor ``after`` (or before ``before``)."""
    limit = max(1, min(limit, MAX_PAGE))
    now = now or datetime.now(timezone.utc)
    where = conditions(filters, now)
    forward = before is None
    cursor = decode_cursor(before if before is not None else after or "", filters.sort)
    with db.session() as session:
        matching = session.scalar(select(func.count()).select_from(FactSubmission).where(*where)) or 0
        query = select(FactSubmission).where(*where)
        if cursor is not None:
            query = query.where(_after(filters.sort, cursor[0], cursor[1], forward))
        rows = list(session.scalars(query.order_by(*_ordered(filters.sort, forward)).limit(limit + 1)))
        more = len(rows) > limit
        rows = rows[:limit]
        if not forward:
            rows.reverse()
        scores = _verifier_scores(session, [r.id for r in rows])
        first = 0
        if rows:  # how many rows come before the first one shown: a count on the same index
            first = 1 + (session.scalar(select(func.count()).select_from(FactSubmission).where(
                *where, _after(filters.sort, _sort_key(filters.sort, rows[0]), rows[0].id, False))) or 0)
    if forward:
        has_next, has_prev = more, cursor is not None
    else:
        has_next, has_prev = True, more
    return QueuePage(
        rows=[
            QueueRow(id=r.id, kb=r.kb, subject=r.subject, predicate=r.predicate, object=r.object,
                     source=r.source, batch_id=r.batch_id, probability=r.probability, reason=r.verdict_reason,
                     created_at=r.created_at, why=r.review_reason, verifiers=scores.get(r.id, []))
            for r in rows
        ],
        next_cursor=_cursor_of(filters.sort, rows[-1]) if rows and has_next else None,
        prev_cursor=_cursor_of(filters.sort, rows[0]) if rows and has_prev else None,
        matching=matching, first=first,
    )


def _verifier_scores(session: Session, ids: Sequence[str]) -> dict[str, list[tuple[str, float | None]]]:
    out: dict[str, list[tuple[str, float | None]]] = {}
    if not ids:
        return out
    rows = session.execute(
        select(CheckResult.submission_id, CheckResult.verifier, CheckResult.probability)
        .where(CheckResult.submission_id.in_(list(ids)), CheckResult.verifier != "fusion")
        .order_by(CheckResult.verifier)
    )
    for submission_id, verifier, probability in rows:
        out.setdefault(submission_id, []).append((verifier, probability))
    return out


def neighbours(
    *, db: Database, filters: QueueFilters, submission_id: str, now: datetime | None = None,
) -> tuple[str | None, str | None]:
    """(previous id, next id) around a submission in the queue's order, under the same filters."""
    now = now or datetime.now(timezone.utc)
    with db.session() as session:
        row = session.get(FactSubmission, submission_id)
        if row is None:
            return None, None
        value = _sort_key(filters.sort, row)
        where = conditions(filters, now)
        found: list[str | None] = []
        for forward in (False, True):
            found.append(session.scalar(
                select(FactSubmission.id).where(*where, _after(filters.sort, value, row.id, forward))
                .order_by(*_ordered(filters.sort, forward)).limit(1)
            ))
    return found[0], found[1]


def queue_counts(*, db: Database, reviewer: str, kb: str = "", now: datetime | None = None) -> QueueCounts:
    now = now or datetime.now(timezone.utc)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    in_kb = [FactSubmission.kb == kb] if kb else []
    with db.session() as session:
        def count(*where: ColumnElement[bool]) -> int:
            return session.scalar(select(func.count()).select_from(FactSubmission).where(*where, *in_kb)) or 0

        decided = select(func.count()).select_from(ReviewDecision).where(ReviewDecision.created_at >= midnight)
        return QueueCounts(
            waiting=count(FactSubmission.status == Status.needs_review),
            awaiting_commit=count(FactSubmission.status == Status.reviewed),
            decided_today=session.scalar(decided) or 0,
            decided_today_by_me=session.scalar(decided.where(ReviewDecision.reviewer == reviewer)) or 0,
        )


def facets(*, db: Database, kb: str = "", limit: int = 50) -> dict[str, list[tuple[str, int]]]:
    """The commonest predicates, sources and knowledge bases among the waiting submissions."""
    where: list[ColumnElement[bool]] = [FactSubmission.status == Status.needs_review]
    if kb:
        where.append(FactSubmission.kb == kb)
    out: dict[str, list[tuple[str, int]]] = {}
    with db.session() as session:
        columns = [("predicate", FactSubmission.predicate), ("source", FactSubmission.source)]
        for name, col in columns if kb else [*columns, ("kb", FactSubmission.kb)]:
            n = func.count().label("n")
            rows = session.execute(
                select(col, n).where(*where, col.is_not(None)).group_by(col).order_by(n.desc(), col).limit(limit)
            )
            out[name] = [(str(v), int(c)) for v, c in rows]
    return out
