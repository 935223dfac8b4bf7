"""``/v1/alerts``."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query

from factloom.metrics import ALERTS_RECEIVED
from factloom.platform.alerts import service
from factloom.platform.alerts.schemas import AlertmanagerWebhook, AlertOut, AlertPage, AlertsReceived
from factloom.platform.auth.service import Principal
from factloom.platform.deps import AdminKey, DbDep, require_scope

__all__ = ["router", "AlertsKey"]

router = APIRouter(prefix="/v1", tags=["alerts"])

# Alertmanager's own key: it may post alerts and do nothing else (an admin key may post them too)
AlertsKey = Annotated[Principal, Depends(require_scope("alerts"))]
Filter = Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00-\x1f]*$")]


@router.post("/alerts", response_model=AlertsReceived)
def receive_alerts(body: AlertmanagerWebhook, _: AlertsKey, db: DbDep) -> AlertsReceived:
    """Alertmanager's webhook (payload version 4, ``deploy/alertmanager/alertmanager.yml``): each alert
    of the notification is stored, or updated by its fingerprint and start (``alerts`` scope)."""
    service.record(db=db, alerts=body.alerts)
    for alert in body.alerts:
        ALERTS_RECEIVED.labels(alert.labels.alertname[:service.NAME_CHARS], alert.status).inc()
    firing = sum(1 for a in body.alerts if a.status == "firing")
    return AlertsReceived(received=len(body.alerts), firing=firing, resolved=len(body.alerts) - firing)


@router.get("/alerts", response_model=AlertPage)
def list_alerts(
    principal: AdminKey, db: DbDep, status: Literal["firing", "resolved"] | None = None, alertname: Filter = None,
    kb: Filter = None, before: Annotated[int | None, Query(ge=1)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> AlertPage:
    """The alerts Alertmanager posted, newest first (admin scope, a key for every kb)."""
    principal.require_all_kbs("reading alerts")
    rows = service.list_alerts(db=db, status=status, alertname=alertname, kb=kb, before=before, limit=limit)
    return AlertPage(items=[AlertOut.of(r) for r in rows], next_before=rows[-1].id if len(rows) == limit else None)
