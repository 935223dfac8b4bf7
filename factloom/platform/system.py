"""Health and readiness; the API-key routes (``factloom.platform.auth.routes``) hang from this router."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
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


@router.get("/readyz", tags=["system"])
def readyz(resources: ResourcesDep) -> JSONResponse:
    """Neo4j, Redis and the SQL ledger all answer."""
    checks: dict[str, Any] = {"neo4j": resources.store.ping()}
    try:
        with resources.db.session() as session:
            session.execute(text("SELECT 1"))
        checks["sql"] = True
    except Exception:
        checks["sql"] = False
    try:
        import redis

        checks["redis"] = bool(redis.Redis.from_url(resources.settings.redis_url, socket_timeout=1).ping())
    except Exception:
        checks["redis"] = False
    ready = all(checks.values())
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)
