"""Admin-only pages: ingest batches with throughput, the registered model versions (activate one to
swap or roll back), the accounts that may sign in, and the audit trail of every write."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any
from urllib.parse import urlencode

import redis
from fastapi import APIRouter, Form, Request, Response

from factloom.config import Settings
from factloom.learn.monitor import feedback_hits
from factloom.ledger import Database, active_versions
from factloom.model.pathrank import PathRankReasoner
from factloom.platform.admin.auth import AdminOnly
from factloom.platform.admin.batches import (
    STATUS_ORDER,
    knowledge_bases,
    list_batches,
    queue_age,
    reviewers,
    throughput,
)
from factloom.platform.admin.render import PREFIX, AdminRoute, flash, redirect, render
from factloom.platform.admin.users import ROLES, create_user, list_users, set_disabled, set_password
from factloom.platform.admin.visuals import COLOURS, minute_chart, status_bar, version_bars
from factloom.platform.audit import service as audit
from factloom.platform.deps import ResourcesDep
from factloom.platform.errors import BadRequest
from factloom.platform.models import service as models
from factloom.verify import VerdictRule

__all__ = ["router"]

router = APIRouter(prefix=PREFIX, route_class=AdminRoute, include_in_schema=False)
PAGE = 50


@router.get("/batches")
def batches_page(request: Request, _: AdminOnly, resources: ResourcesDep, kb: str = "", before: str = "") -> Response:
    kb = kb.strip()[:64]
    rows = list_batches(db=resources.db, kb=kb, limit=PAGE, before=before.strip()[:32])
    stats = throughput(db=resources.db, kb=kb)
    return render(request, "batches.html", rows=rows, stats=stats, kb=kb, kbs=knowledge_bases(db=resources.db),
                  order=STATUS_ORDER, colours=COLOURS, chart=minute_chart(stats.per_minute),
                  people=reviewers(db=resources.db, kb=kb), age=queue_age(db=resources.db, kb=kb),
                  bar=lambda counts: status_bar(counts, STATUS_ORDER),
                  older=rows[-1].id if len(rows) == PAGE else None)


# the numbers that tell two versions of a kind apart, in this order where a version has them
SUMMARY = ("dev_hits_at_1", "valid_accuracy", "accuracy", "examples", "facts", "train_questions", "epochs",
           "final_loss", "train_seconds")


def summary(metrics: dict[str, Any] | None) -> list[tuple[str, Any]]:
    found = metrics or {}
    return [(k.replace("_", " "), found[k]) for k in SUMMARY if isinstance(found.get(k), int | float)][:3]


# versions whose serving figures the page shows: those that serve, or served lately
SERVING = ("active", "ab", "shadow", "rolled_back")


@router.get("/models")
def models_page(request: Request, _: AdminOnly, resources: ResourcesDep, kb: str = "") -> Response:
    every = models.list_models(db=resources.db, limit=500)
    kbs = sorted({m.kb for m in every if m.kb})
    rows = [m for m in every if not kb or m.kb == kb]
    figures: dict[str, dict[str, Any]] = {}
    for m in [m for m in rows if m.status in SERVING and m.kb][:40]:
        try:
            roles = models.figures(client=resources.redis, row=m)
        except redis.RedisError:  # the page still lists and acts on versions while Redis is down
            break
        right, marked = feedback_hits(resources.db, str(m.kb), m.id) if m.kind == "reasoner" else (0, 0)
        figures[m.id] = {"roles": {r: f for r, f in roles.items() if f.questions},
                         "hits": right / marked if marked else None, "marked": marked}
    chart = version_bars([(m.id, m.status if m.status != "ab" else f"ab {m.traffic_share:.0%}",
                           figures[m.id]["hits"], _p95(figures[m.id]["roles"]))
                          for m in rows if m.id in figures and m.kind in ("reasoner", "router")])
    rollbacks = audit.list_events(db=resources.db, action="model.rollback", actor=None, before=None, limit=5)
    kbs = sorted({*kbs, *knowledge_bases(db=resources.db)})
    return render(request, "models.html", rows=rows, kb=kb, kbs=kbs, summary=summary, figures=figures,
                  chart=chart, rollbacks=[e for e in rollbacks if not kb or (e.details or {}).get("kb") == kb],
                  serving=serving_now(resources.db, [kb] if kb else kbs, resources.settings))


# what answers or checks for a kb of each kind when no learned version of it is active
BASELINES = {
    "reasoner": f"path-ranking baseline ({PathRankReasoner.version}): the chains of relations leaving the linked "
                "entities, ranked by how close their wording is to the question's",
    "router": "no router: plain k-hop expansion from the linked entities",
    "scorer": "no scorer: the plausibility check abstains",
    "fusion": "rule ({rule}): the most doubtful verifier decides; accept at ≥ {accept:g}, reject at ≤ {reject:g}",
}


def serving_now(db: Database, kbs: Sequence[str], settings: Settings) -> list[tuple[str, str, str | None, str]]:
    """(kb, kind, active version or None, what serves) for every kb and kind: a baseline where nothing
    learned is active."""
    active = active_versions(db, BASELINES)
    rule = {"rule": VerdictRule().version, "accept": settings.accept_threshold, "reject": settings.reject_threshold}
    out = []
    for kb in kbs:
        for kind, baseline in BASELINES.items():
            version = active.get((kind, kb), (None, ""))[0]
            out.append((kb, kind, version, f"learned version {version}" if version else baseline.format(**rule)))
    return out


def _p95(roles: dict[str, Any]) -> float | None:
    found = [f.p95_ms for f in roles.values() if f.p95_ms is not None]
    return max(found) if found else None


def _back(request: Request, kb: str | None, message: str) -> Response:
    return flash(request, redirect(f"{PREFIX}/models?{urlencode({'kb': kb or ''})}"), message)


@router.post("/models/{version}/activate")
def models_activate(version: str, request: Request, me: AdminOnly, resources: ResourcesDep) -> Response:
    row = models.activate(db=resources.db, version=version, actor=me.actor)
    return _back(request, row.kb, f"{version} is now the active {row.kind} of {row.kb}: served within seconds")


@router.post("/models/{version}/trial")
def models_trial(
    version: str, request: Request, me: AdminOnly, resources: ResourcesDep, mode: Annotated[str, Form()],
    share: Annotated[float, Form(gt=0.0, lt=100.0)] = 10.0,
) -> Response:
    """Shadow, A/B (``share`` in percent) or stop a version's trial."""
    if mode == "stop":
        row = models.stop_trial(db=resources.db, version=version, actor=me.actor)
        return _back(request, row.kb, f"{version} is off its trial")
    if mode not in ("shadow", "ab"):
        raise BadRequest(f"a trial is shadow or ab, not {mode!r}")
    row = models.try_version(db=resources.db, version=version, mode=mode, share=share / 100.0, actor=me.actor)
    what = "answers beside the active version, unseen" if mode == "shadow" else \
        f"answers {row.traffic_share:.0%} of the questions of {row.kb}"
    return _back(request, row.kb, f"{version} {what}")


@router.post("/models/rollback")
def models_rollback(
    request: Request, me: AdminOnly, resources: ResourcesDep, kb: Annotated[str, Form(max_length=64)],
    kind: Annotated[str, Form(max_length=32)],
) -> Response:
    off, on = models.roll_back(db=resources.db, kb=kb, kind=kind, actor=me.actor)
    return _back(request, kb, f"{off} rolled back: {on} serves {kb} again within seconds")


@router.get("/audit")
def audit_page(request: Request, _: AdminOnly, resources: ResourcesDep, action: str = "", actor: str = "",
               before: int | None = None) -> Response:
    action, actor = action.strip()[:200], actor.strip()[:200]
    rows = audit.list_events(db=resources.db, action=action or None, actor=actor or None, before=before, limit=PAGE)
    return render(request, "audit.html", rows=rows, action=action, actor=actor,
                  older=rows[-1].id if len(rows) == PAGE else None)


@router.get("/users")
def users_page(request: Request, _: AdminOnly, resources: ResourcesDep) -> Response:
    return render(request, "users.html", users=list_users(db=resources.db), roles=ROLES)


@router.post("/users")
def users_create(
    request: Request, me: AdminOnly, resources: ResourcesDep, name: Annotated[str, Form(max_length=200)],
    role: Annotated[str, Form()], password: Annotated[str, Form(max_length=1000)],
) -> Response:
    create_user(db=resources.db, name=name, role=role, password=password, actor=me.actor)
    return flash(request, redirect(f"{PREFIX}/users"), f"Created {role} {name.strip()}")


@router.post("/users/{name}/disabled")
def users_disable(
    name: str, request: Request, me: AdminOnly, resources: ResourcesDep, disabled: Annotated[str, Form()],
) -> Response:
    off = disabled == "yes"
    if off and name == me.user.name:
        raise BadRequest("you cannot disable your own account")
    set_disabled(db=resources.db, name=name, disabled=off, actor=me.actor)
    return flash(request, redirect(f"{PREFIX}/users"), f"{'Disabled' if off else 'Enabled'} {name}")


@router.post("/users/{name}/password")
def users_password(
    name: str, request: Request, me: AdminOnly, resources: ResourcesDep,
    password: Annotated[str, Form(max_length=1000)],
) -> Response:
    set_password(db=resources.db, name=name, password=password, actor=me.actor)
    if name == me.user.name:  # this browser's sign-in ended with the others
        return flash(request, redirect(f"{PREFIX}/login"), "Password changed; sign in with the new one")
    return flash(request, redirect(f"{PREFIX}/users"), f"New password for {name}; their sign-ins have ended")
