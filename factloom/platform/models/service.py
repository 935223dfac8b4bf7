"""The model registry for the API and the CLI: list versions, activate one."""

from __future__ import annotations

from factloom.ledger import Database, ModelVersion, activate_version, list_versions
from factloom.platform.errors import Conflict, NotFound

__all__ = ["list_models", "activate"]


def list_models(*, db: Database, kind: str | None = None, kb: str | None = None,
                limit: int = 100) -> list[ModelVersion]:
    return list_versions(db, kind=kind, kb=kb, limit=limit)


def activate(*, db: Database, version: str, actor: str) -> ModelVersion:
    """Serve ``version`` for its kind and kb from now on: the API and the check workers pick it up
    within seconds (their registry reads are cached for 5 and 10 s)."""
    try:
        return activate_version(db, version, actor=actor)
    except LookupError as exc:
        raise NotFound(str(exc)) from exc
    except ValueError as exc:
        raise Conflict(str(exc)) from exc
