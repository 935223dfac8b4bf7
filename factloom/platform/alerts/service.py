"""Storing the alerts Alertmanager posts, and reading them back.

One row per firing of an alert: Alertmanager names an alert by the fingerprint of its labels, and a
firing by when it started, so ``(fingerprint, starts_at)`` is the row's key. A notification repeats
every alert of its group, firing and resolved alike (``send_resolved``), so a post updates the rows it
names in place: its status, end, annotations and when it was last received. A late "firing" for a
firing that was already posted as resolved (a retried delivery overtaken by a newer one) does not
make it fire again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import case, select
from sqlalchemy.exc import IntegrityError

from factloom.ledger import Database, newest_first
from factloom.ledger.tables import AlertEvent, as_utc
from factloom.platform.alerts.schemas import AlertIn

__all__ = ["record", "list_alerts", "firing_first"]

# the widths of alert_event's columns; longer label values are cut to them (the labels keep them whole)
SEVERITY_CHARS, KB_CHARS, NAME_CHARS = 32, 64, 200


def _apply(row: AlertEvent, alert: AlertIn, now: datetime) -> None:
    labels = alert.labels.as_dict()
    if row.status == "resolved" and alert.status == "firing":
        return  # out of order: that firing is over
    row.status = alert.status
    row.alertname = alert.labels.alertname[:NAME_CHARS]
    severity, kb = labels.get("severity"), labels.get("kb")
    row.severity = severity[:SEVERITY_CHARS] if severity else None
    row.kb = kb[:KB_CHARS] if kb else None
    row.summary = alert.annotations.get("summary", "")
    row.labels = labels
    row.annotations = dict(alert.annotations)
    row.ends_at = alert.endsAt if alert.status == "resolved" else None
    row.received_at = now


def record(*, db: Database, alerts: Sequence[AlertIn], now: datetime | None = None) -> list[AlertEvent]:
    """Insert or update one row per alert, all in one transaction; the rows, in the order sent."""
    now = now or datetime.now(UTC)
    for attempt in range(3):
        try:
            return _record(db, alerts, now)
        except IntegrityError:
            # another API process stored the same firing between our read and our insert (two
            # Alertmanagers of a cluster post the same notification): read it again and update it
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _record(db: Database, alerts: Sequence[AlertIn], now: datetime) -> list[AlertEvent]:
    rows: list[AlertEvent] = []
    with db.session() as session:
        for alert in alerts:
            starts = as_utc(alert.startsAt)
            row = session.scalar(select(AlertEvent).where(AlertEvent.fingerprint == alert.fingerprint,
                                                          AlertEvent.starts_at == starts))
            if row is None:
                row = AlertEvent(fingerprint=alert.fingerprint, starts_at=starts, status=alert.status)
                session.add(row)
            _apply(row, alert, now)
            session.flush()  # the next alert of this post may name the same firing
            rows.append(row)
    return rows


def list_alerts(*, db: Database, status: str | None = None, alertname: str | None = None, kb: str | None = None,
                before: int | None = None, limit: int = 100) -> list[AlertEvent]:
    """Newest first (by when each firing was first received); ``before`` pages on past that row id."""
    return newest_first(db, AlertEvent, before=before, limit=limit, status=status, alertname=alertname, kb=kb)


def firing_first(*, db: Database, limit: int = 50) -> list[AlertEvent]:
    """What the admin Status page lists: every firing alert, then the latest resolved ones, ``limit`` in all."""
    order = case((AlertEvent.status == "firing", 0), else_=1)
    query = select(AlertEvent).order_by(order, AlertEvent.received_at.desc(), AlertEvent.id.desc()).limit(limit)
    with db.session() as session:
        return list(session.scalars(query).all())
