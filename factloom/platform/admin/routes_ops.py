"""Admin-only pages: ingest batches with throughput, and the accounts that may sign in."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from factloom.platform.admin.auth import AdminOnly
from factloom.platform.admin.batches import STATUS_ORDER, knowledge_bases, list_batches, throughput
from factloom.platform.admin.render import PREFIX, AdminRoute, flash, redirect, render
from factloom.platform.admin.users import ROLES, create_user, list_users, set_disabled
from factloom.platform.admin.visuals import COLOURS, sparkline, status_bar
from factloom.platform.deps import ResourcesDep
from factloom.platform.errors import BadRequest

__all__ = ["router"]

router = APIRouter(prefix=PREFIX, route_class=AdminRoute, include_in_schema=False)
PAGE = 50


@router.get("/batches")
def batches_page(request: Request, _: AdminOnly, resources: ResourcesDep, kb: str = "", before: str = "") -> Response:
    rows = list_batches(db=resources.db, kb=kb.strip()[:64], limit=PAGE, before=before.strip()[:32])
    stats = throughput(db=resources.db)
    return render(request, "batches.html", rows=rows, stats=stats, kb=kb, kbs=knowledge_bases(db=resources.db),
                  order=STATUS_ORDER, colours=COLOURS, spark=sparkline(stats.per_minute),
                  bar=lambda counts: status_bar(counts, STATUS_ORDER),
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
