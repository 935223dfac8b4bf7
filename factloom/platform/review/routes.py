"""``/v1/review``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from factloom.ledger import Status
from factloom.platform.deps import DbDep, ReviewKey, SettingsDep, StoreDep
from factloom.platform.ingest.routes import submission_out
from factloom.platform.review import service
from factloom.platform.review.schemas import DecisionIn, DecisionOut, ReviewPage

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["review"])


@router.get("/review", response_model=ReviewPage)
def list_review(
    principal: ReviewKey,
    db: DbDep,
    kb: str | None = None,
    status: Status = Status.needs_review,
    predicate: str | None = None,
    source: str | None = None,
    batch_id: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    # SQL's offsets are 64-bit integers: a deeper one would fail in the database, not answer empty
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
) -> ReviewPage:
    rows, total = service.list_submissions(
        db=db, kb=None, kbs=principal.visible_kbs(kb), status=status, predicate=predicate, source=source,
        batch_id=batch_id, limit=limit, offset=offset,
    )
    return ReviewPage(items=[submission_out(r) for r in rows], total=total, limit=limit, offset=offset)


@router.post("/review/{submission_id}", response_model=DecisionOut)
def post_decision(
    submission_id: str, body: DecisionIn, principal: ReviewKey, db: DbDep, settings: SettingsDep, store: StoreDep,
) -> DecisionOut:
    principal.require_kb(service.kb_of(db=db, submission_id=submission_id))
    status = service.decide(
        db=db, submission_id=submission_id, decision=body.decision, reason=body.reason,
        reviewer=principal.actor, second_opinion_kbs=settings.review_second_opinion, store=store,
    )
    return DecisionOut(id=submission_id, status=status.value, decision=body.decision)
