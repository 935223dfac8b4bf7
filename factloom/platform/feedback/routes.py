"""``/v1/feedback``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from factloom.platform.deps import DbDep, QueryKey, ResourcesDep
from factloom.platform.feedback import service
from factloom.platform.feedback.schemas import FeedbackIn, FeedbackOut, FeedbackPage, FeedbackRecorded
from factloom.platform.ingest.schemas import KbName

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["feedback"])


@router.post("/feedback", status_code=status.HTTP_201_CREATED, response_model=FeedbackRecorded)
def post_feedback(body: FeedbackIn, principal: QueryKey, resources: ResourcesDep) -> FeedbackRecorded:
    """Record whether answers were right: a batch of 1 to 1000 items, written whole or not at all."""
    principal.require_kb(body.kb)
    service.require_kb(store=resources.store, kb=body.kb)
    ids = service.record(db=resources.db, kb=body.kb, items=body.items, actor=principal.actor)
    return FeedbackRecorded(count=len(ids), ids=ids)


@router.get("/feedback", response_model=FeedbackPage)
def list_feedback(
    principal: QueryKey, db: DbDep, kb: Annotated[KbName | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> FeedbackPage:
    """The newest feedback, of one kb or of all (that the key may read)."""
    rows = service.list_feedback(db=db, kb=None, kbs=principal.visible_kbs(kb), limit=limit)
    return FeedbackPage(items=[FeedbackOut.model_validate(r, from_attributes=True) for r in rows], limit=limit)
