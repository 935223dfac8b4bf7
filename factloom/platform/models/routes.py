"""``/v1/models``."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query

from factloom.platform.deps import AdminKey, DbDep, ResourcesDep
from factloom.platform.ingest.schemas import KbName
from factloom.platform.models import service
from factloom.platform.models.schemas import (
    AbRequest,
    FiguresOut,
    LearnQueued,
    LearnRequest,
    ModelPage,
    ModelVersionOut,
    RollbackRequest,
    RolledBack,
    VersionFigures,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["models"])


def _in_reach(version: str, principal: AdminKey, db: DbDep) -> str:
    """The path's ``version``, once the key may act on its kb (404 for an unknown version, 403 for one
    of a kb the key does not reach)."""
    principal.require_kb(service.kb_of(db=db, version=version))
    return version


VersionInReach = Annotated[str, Depends(_in_reach)]


@router.get("/models", response_model=ModelPage)
def list_models(
    principal: AdminKey, db: DbDep, kind: Literal["router", "reasoner", "scorer", "fusion"] | None = None,
    kb: str | None = None, limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> ModelPage:
    """The registered versions, newest first; one per kind and kb is ``active``."""
    rows = service.list_models(db=db, kind=kind, kbs=principal.visible_kbs(kb), limit=limit)
    return ModelPage(items=[ModelVersionOut.of(r) for r in rows])


@router.post("/models/{version}/activate", response_model=ModelVersionOut)
def activate(version: VersionInReach, principal: AdminKey, db: DbDep) -> ModelVersionOut:
    """Serve ``version`` for its kind and kb; the one active before retires (a swap or a rollback)."""
    return ModelVersionOut.of(service.activate(db=db, version=version, actor=principal.actor))


@router.post("/models/{version}/promote", response_model=ModelVersionOut)
def promote(version: VersionInReach, principal: AdminKey, db: DbDep) -> ModelVersionOut:
    """End ``version``'s trial by serving it for all of the kb's questions (the same as ``activate``)."""
    return activate(version, principal, db)


@router.post("/models/{version}/shadow", response_model=ModelVersionOut)
def shadow(version: VersionInReach, principal: AdminKey, db: DbDep) -> ModelVersionOut:
    """Let ``version`` answer every question of its kb beside the active version, unseen: its latency
    and its agreement with the active version are recorded (``GET /v1/models/{version}/figures``)."""
    return ModelVersionOut.of(service.try_version(db=db, version=version, mode="shadow", actor=principal.actor))


@router.post("/models/{version}/ab", response_model=ModelVersionOut)
def ab(version: str, body: AbRequest, principal: AdminKey, db: DbDep) -> ModelVersionOut:
    """Send ``share`` of the kb's questions to ``version`` instead of the active one, sticky per API
    key. The monitor promotes or stops it when its sequential test decides (``ab_auto``)."""
    _in_reach(version, principal, db)  # not a dependency: a malformed body is answered first (422)
    return ModelVersionOut.of(service.try_version(db=db, version=version, mode="ab", share=body.share,
                                                  actor=principal.actor))


@router.post("/models/{version}/stop", response_model=ModelVersionOut)
def stop(version: VersionInReach, principal: AdminKey, db: DbDep) -> ModelVersionOut:
    """Take ``version`` off its shadow or A/B trial; it stays a candidate."""
    return ModelVersionOut.of(service.stop_trial(db=db, version=version, actor=principal.actor))


@router.post("/models/rollback", response_model=RolledBack)
def roll_back(body: RollbackRequest, principal: AdminKey, db: DbDep) -> RolledBack:
    """Take the kb's active ``kind`` off (``rolled_back``) and serve its last good version again:
    its parent where that can serve, else the newest retired one."""
    principal.require_kb(body.kb)
    off, on = service.roll_back(db=db, kb=body.kb, kind=body.kind, actor=principal.actor)
    return RolledBack(kb=body.kb, kind=body.kind, rolled_back=off, active=on)


@router.get("/models/{version}/figures", response_model=VersionFigures)
def figures(version: str, principal: AdminKey, resources: ResourcesDep) -> VersionFigures:
    """What ``version`` answered in each role (active, ab, shadow), summed over every API process."""
    row = service.get(db=resources.db, version=version)
    principal.require_kb(row.kb)
    roles = service.figures(client=resources.redis, row=row)
    return VersionFigures(version=row.id, status=row.status, roles={
        role: FiguresOut(questions=f.questions, errors=f.errors, error_rate=f.error_rate, p95_ms=f.p95_ms,
                         compared=f.compared, agreement=f.agreement) for role, f in roles.items()})


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
