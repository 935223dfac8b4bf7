"""FastAPI dependencies, as ``Annotated`` aliases the routes declare.

The ones that only read ``app.state`` are ``async``: FastAPI runs a plain ``def`` dependency in its
thread pool, a hop per dependency per request; the API-key check reads the ledger and stays a ``def``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.ledger import Database
from factloom.platform.auth.service import Principal, authenticate
from factloom.platform.errors import Forbidden, Unauthorized
from factloom.platform.resources import Resources

__all__ = [
    "ResourcesDep", "SettingsDep", "DbDep", "StoreDep", "require_scope",
    "IngestKey", "QueryKey", "ReviewKey", "AdminKey",
]


async def get_resources(request: Request) -> Resources:
    return request.app.state.resources  # type: ignore[no-any-return]


ResourcesDep = Annotated[Resources, Depends(get_resources)]


async def get_settings_dep(resources: ResourcesDep) -> Settings:
    return resources.settings


async def get_db(resources: ResourcesDep) -> Database:
    return resources.db


async def get_store(resources: ResourcesDep) -> Neo4jStore:
    return resources.store


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
DbDep = Annotated[Database, Depends(get_db)]
StoreDep = Annotated[Neo4jStore, Depends(get_store)]


def require_scope(scope: str) -> Callable[..., Principal]:
    def dependency(request: Request, db: DbDep) -> Principal:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("missing API key; send 'Authorization: Bearer KEY'")
        principal = authenticate(db=db, token=token.strip())
        if not principal.has(scope):
            raise Forbidden(f"this key lacks the '{scope}' scope", needed=scope)
        request.state.principal = principal
        return principal

    return dependency


IngestKey = Annotated[Principal, Depends(require_scope("ingest"))]
QueryKey = Annotated[Principal, Depends(require_scope("query"))]
ReviewKey = Annotated[Principal, Depends(require_scope("review"))]
AdminKey = Annotated[Principal, Depends(require_scope("admin"))]
