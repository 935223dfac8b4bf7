"""Health and readiness; the API-key routes (``factloom.platform.auth.routes``) hang from this router."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy import text

from factloom import __version__
from factloom.platform.auth.routes import router as keys_router
from factloom.platform.deps import ResourcesDep

__all__ = ["router"]

router = APIRouter()
router.include_router(keys_router)


@router.get("/healthz", tags=["system"])
def healthz() -> dict[str, str]:
    """The process is alive."""
    return {"status": "ok", "version": __version__}


class Readiness(BaseModel):
    ready: bool
    checks: dict[str, bool] = Field(description="each store: neo4j, sql, redis; true when it answered")
    down: list[str] = Field(description="the stores that did not answer")


@router.get("/readyz", tags=["system"], response_model=Readiness,
            responses={503: {"model": Readiness, "description": "a store did not answer; `down` says which"}})
def readyz(resources: ResourcesDep) -> JSONResponse:
    """Neo4j, Redis and the SQL ledger all answer; 503 names the ones that do not."""
    checks: dict[str, bool] = {"neo4j": resources.store.ping()}
    try:
        with resources.db.session() as session:
            session.execute(text("SELECT 1"))
        checks["sql"] = True
    except Exception:
        checks["sql"] = False
    try:
        checks["redis"] = bool(resources.redis.ping())  # the process's pool: no new connection per call
    except Exception:
        checks["redis"] = False
    out = Readiness(ready=all(checks.values()), checks=checks, down=[name for name, up in checks.items() if not up])
    return JSONResponse(out.model_dump(), status_code=200 if out.ready else 503)
