"""``/v1/audit``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from factloom.platform.audit import service
from factloom.platform.audit.schemas import AuditEventOut, AuditPage
from factloom.platform.deps import AdminKey, DbDep

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["audit"])

Filter = Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00-\x1f]*$")]


@router.get("/audit", response_model=AuditPage)
def list_audit(
    principal: AdminKey, db: DbDep, action: Filter = None, actor: Filter = None, target: Filter = None,
    before: Annotated[int | None, Query(ge=1)] = None, limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> AuditPage:
    """Every write, newest first (admin scope, a key for every kb): facts taken, feedback, review
    decisions, model changes, keys and users. ``action`` is a whole action or its family (``key``)."""
    principal.require_all_kbs("reading the audit trail")
    rows = service.list_events(db=db, action=action, actor=actor, target=target, before=before, limit=limit)
    return AuditPage(items=[AuditEventOut.of(r) for r in rows],
                     next_before=rows[-1].id if len(rows) == limit else None)
