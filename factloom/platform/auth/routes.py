"""``/v1/keys``: create, list, revoke and rotate API keys (admin scope, a key for every kb), audited."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Body, status

from factloom.platform.auth import service
from factloom.platform.auth.schemas import KeyCreated, KeyIn, KeyOut, KeyPage, RotateIn
from factloom.platform.deps import AdminKey, ResourcesDep

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["keys"])



@router.post("/keys", status_code=status.HTTP_201_CREATED, response_model=KeyCreated)
def post_key(body: KeyIn, principal: AdminKey, resources: ResourcesDep) -> KeyCreated:
    """A new key; its secret is in this answer only. ``kbs`` limits it to those knowledge bases."""
    principal.require_all_kbs("creating keys")
    expires_at = service.expiry(days=body.expires_in_days, at=body.expires_at)
    token, made = service.create_key(db=resources.db, name=body.name, scopes=body.scopes, kbs=body.kbs,
                                     expires_at=expires_at, actor=principal.actor)
    return KeyCreated(**asdict(service.get_key(db=resources.db, key_id=made.key_id)), key=token)


@router.get("/keys", response_model=KeyPage)
def list_keys(principal: AdminKey, resources: ResourcesDep, include_revoked: bool = False) -> KeyPage:
    """Every key, newest first, without its secret; revoked ones with ``include_revoked=true``."""
    principal.require_all_kbs("listing keys")
    keys = service.list_keys(db=resources.db, include_revoked=include_revoked)
    return KeyPage(items=[KeyOut(**asdict(k)) for k in keys])


@router.post("/keys/{key_id}/revoke", response_model=KeyOut)
def revoke(key_id: str, principal: AdminKey, resources: ResourcesDep) -> KeyOut:
    """Refuse the key from now on: at once in this API process, within 5 s in the others."""
    principal.require_all_kbs("revoking keys")
    info = service.revoke_key(db=resources.db, key_id=key_id, actor=principal.actor)
    resources.keys.forget(key_id)
    return KeyOut(**asdict(info))


@router.post("/keys/{key_id}/rotate", status_code=status.HTTP_201_CREATED, response_model=KeyCreated)
def rotate(
    key_id: str, principal: AdminKey, resources: ResourcesDep, body: Annotated[RotateIn | None, Body()] = None,
) -> KeyCreated:
    """A new secret for the key (a new key id, the same name, scopes and kbs); the old key is revoked."""
    principal.require_all_kbs("rotating keys")
    days = body.expires_in_days if body is not None else None
    token, info = service.rotate_key(db=resources.db, key_id=key_id, actor=principal.actor,
                                     expires_at=service.expiry(days=days))
    resources.keys.forget(key_id)
    return KeyCreated(**asdict(info), key=token)
