"""``/v1/models``."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from factloom.platform.deps import AdminKey, DbDep
from factloom.platform.ingest.schemas import KbName
from factloom.platform.models import service
from factloom.platform.models.schemas import LearnQueued, LearnRequest, ModelPage, ModelVersionOut

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["models"])


@router.get("/models", response_model=ModelPage)
def list_models(
    principal: AdminKey, db: DbDep, kind: Literal["router", "reasoner", "scorer", "fusion"] | None = None,
    kb: str | None = None, limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> ModelPage:
    """The registered versions, newest first; one per kind and kb is ``active``."""
    rows = service.list_models(db=db, kind=kind, kbs=principal.visible_kbs(kb), limit=limit)
    return ModelPage(items=[ModelVersionOut.of(r) for r in rows])


@router.post("/models/{version}/activate", response_model=ModelVersionOut)
def activate(version: str, principal: AdminKey, db: DbDep) -> ModelVersionOut:
    """Serve ``version`` for its kind and kb; the one active before retires (a swap or a rollback)."""
    principal.require_kb(service.kb_of(db=db, version=version))
    return ModelVersionOut.of(service.activate(db=db, version=version, actor=principal.actor))


@router.post("/models/learn", response_model=LearnQueued, status_code=202)
def learn(body: LearnRequest, principal: AdminKey, db: DbDep) -> LearnQueued:
    """Queue a continual update of the kb's ``scorer`` (from facts committed since it learned) or
    ``reasoner`` (from answer feedback) now, without waiting for ``learn_min_facts``; 409 when
    nothing is new. The learner registers the candidate with its gates (``GET /v1/models``)."""
    principal.require_kb(body.kb)
    new = service.request_update(db=db, kb=body.kb, kind=body.kind)
    return LearnQueued(kb=body.kb, kind=body.kind, new=new)


@router.get("/models/learn", response_model=LearnQueued)
def unlearned(
    principal: AdminKey, db: DbDep, kb: KbName, kind: Literal["scorer", "reasoner"] = "scorer",
) -> LearnQueued:
    """How much the kb's active ``kind`` has not learned yet: facts committed (scorer) or answers
    marked (reasoner) since its watermark. The beat's plan queues an update once that reaches
    ``learn_min_facts`` (``learn_min_feedback``)."""
    principal.require_kb(kb)
    return LearnQueued(kb=kb, kind=kind, new=service.unlearned(db=db, kb=kb, kind=kind))
