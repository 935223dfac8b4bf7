"""FastAPI dependencies, as ``Annotated`` aliases the routes declare.

They are ``async``: FastAPI runs a plain ``def`` dependency in its thread pool, a hop per dependency
per request. The API-key check reads the ledger, in the thread pool, only for a key this process has
not verified in the last few seconds (:class:`~factloom.platform.auth.service.KeyCache`); it is also
where the rate limits are applied (:mod:`factloom.platform.auth.limits`): failed authentications per
client address and key prefix before a key is verified, then the key's own bucket."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.ledger import Database
from factloom.platform.auth.limits import RateLimiter, limiter
from factloom.platform.auth.service import Principal, authenticate, token_prefix
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


def require_scope(scope: str) -> Callable[..., Awaitable[Principal]]:
    async def dependency(request: Request, resources: ResourcesDep) -> Principal:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("missing API key; send 'Authorization: Bearer KEY'")
        limits = limiter(resources.settings)
        principal = resources.keys.get(token)
        if principal is None:
            principal = await _verify(request, resources, limits, token)
        await limits.charge_key(principal.key_id)
        if not principal.has(scope):
            raise Forbidden(f"this key lacks the '{scope}' scope", needed=scope)
        request.state.principal = principal
        return principal

    return dependency


async def _verify(request: Request, resources: Resources, limits: RateLimiter, token: str) -> Principal:
    """Verify ``token`` against the ledger, unless this address failed too often with its prefix."""
    address = request.client.host if request.client else "unknown"
    prefix = token_prefix(token) or "-"
    await limits.check_failures(address, prefix)
    try:
        principal = await run_in_threadpool(authenticate, db=resources.db, token=token)
    except Unauthorized:
        await limits.note_failure(address, prefix)
        raise
    resources.keys.put(token, principal)
    return principal


IngestKey = Annotated[Principal, Depends(require_scope("ingest"))]
QueryKey = Annotated[Principal, Depends(require_scope("query"))]
ReviewKey = Annotated[Principal, Depends(require_scope("review"))]
AdminKey = Annotated[Principal, Depends(require_scope("admin"))]
