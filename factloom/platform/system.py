"""Health, readiness and API-key administration."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy import text

from factloom import __version__
from factloom.platform.auth.service import create_key
from factloom.platform.deps import AdminKey, ResourcesDep

__all__ = ["router"]

router = APIRouter()


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


class KeyIn(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    scopes: list[str] = Field(min_length=1)


class KeyOut(BaseModel):
    id: str
    name: str
    scopes: list[str]
    key: str = Field(description="shown once; only its hash is stored")


@router.post("/v1/keys", tags=["system"], status_code=201, response_model=KeyOut)
def post_key(body: KeyIn, _: AdminKey, resources: ResourcesDep) -> KeyOut:
    token, principal = create_key(db=resources.db, name=body.name, scopes=body.scopes)
    return KeyOut(id=principal.key_id, name=principal.name, scopes=sorted(principal.scopes), key=token)
