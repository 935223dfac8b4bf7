"""The admin Status page: the platform's key figures as charts, for those without Grafana, and the
alerts Alertmanager posted (firing first)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from factloom.platform.admin.auth import AdminOnly
from factloom.platform.admin.render import PREFIX, AdminRoute, render
from factloom.platform.admin.status import bar_chart, readings
from factloom.platform.admin.visuals import COLOURS, status_bar
from factloom.platform.alerts import service as alerts
from factloom.platform.deps import ResourcesDep

__all__ = ["router"]

router = APIRouter(prefix=PREFIX, route_class=AdminRoute, include_in_schema=False)
VERDICTS = ("accepted", "needs_review", "rejected")


@router.get("/status")
def status_page(request: Request, _: AdminOnly, resources: ResourcesDep) -> Response:
    figures = readings(request.app.state.ledger_metrics)
    rows = alerts.firing_first(db=resources.db, limit=50)
    charts = {
        "requests": bar_chart(figures.requests, label="requests per route"),
        "latency": bar_chart(figures.latency, label="p95 latency per route"),
        "errors": bar_chart(figures.errors, label="5xx share per route",
                            top=max([0.05, *(b.value for b in figures.errors)])),
        "queues": bar_chart(figures.queues, label="messages waiting per queue"),
        "tasks": bar_chart(figures.tasks, label="task p95 per queue"),
        "abstention": bar_chart(figures.abstention, label="abstention share per verifier", top=1.0),
        "learn": bar_chart(figures.learn, label="learn updates by outcome"),
        "served": bar_chart(figures.served, label="questions served per version and role"),
        "agreement": bar_chart(figures.agreement, label="shadow agreement", top=1.0),
        "failing": bar_chart(figures.failing, label="failing periods", top=3.0),
        "rollbacks": bar_chart(figures.rollbacks, label="rollbacks"),
        "stores": bar_chart(figures.stores, label="store round trip p95"),
        "entropy": bar_chart(figures.entropy, label="router attention entropy per hop"),
    }
    return render(request, "status.html", charts=charts, figures=figures, alerts=rows,
                  firing=sum(1 for a in rows if a.status == "firing"),
                  verdict_bar=status_bar(figures.verdicts, VERDICTS, width=460), verdict_order=VERDICTS,
                  colours=COLOURS)
