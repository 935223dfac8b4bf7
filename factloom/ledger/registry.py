"""The model registry: ``model_version`` rows, one ``active`` version per kind and kb.

Serving reads the active versions (the API's query engine and the check workers, each within a few
seconds), so registering or activating a version swaps it in without a restart, and activating an
older one rolls back.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import select

from factloom.ledger.db import Database
from factloom.ledger.tables import AuditEvent, ModelVersion

__all__ = ["active_versions", "register_version", "list_versions", "activate_version"]


def active_versions(db: Database, kinds: Iterable[str]) -> dict[tuple[str, str], tuple[str, str]]:
    """``(kind, kb) → (version, artefact)`` of every active version of ``kinds``, in one query;
    where a kb has several active versions of a kind, the newest wins. Rows without a kb are skipped."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    with db.session() as session:
        rows = session.execute(
            select(ModelVersion.id, ModelVersion.kind, ModelVersion.artefact, ModelVersion.metrics)
            .where(ModelVersion.kind.in_(list(kinds)), ModelVersion.status == "active")
            .order_by(ModelVersion.created_at.desc())
        ).all()
    for version, kind, artefact, metrics in rows:
        kb = (metrics or {}).get("kb")
        if kb is not None:
            out.setdefault((kind, str(kb)), (version, artefact))
    return out


def register_version(db: Database, *, kind: str, kb: str, artefact: Path, metrics: dict[str, Any]) -> str:
    """Register ``artefact`` as the active ``kind`` for ``kb``; the previous active one retires."""
    version = f"{kind}-{kb}-{time.strftime('%Y%m%d%H%M%S')}-{random.randrange(16**4):04x}"
    with db.session() as session:
        _retire(session, kind, kb)
        session.add(ModelVersion(id=version, kind=kind, artefact=str(artefact), metrics={"kb": kb, **metrics},
                                 gates={}, status="active", traffic_share=1.0))
    return version


def list_versions(db: Database, *, kind: str | None = None, kb: str | None = None,
                  limit: int = 100) -> list[ModelVersion]:
    """The newest ``limit`` versions, of one ``kind`` and one ``kb`` where given."""
    query = select(ModelVersion).order_by(ModelVersion.created_at.desc())
    if kind is not None:
        query = query.where(ModelVersion.kind == kind)
    with db.session() as session:
        # the kb sits in the metrics JSON, which SQLite and PostgreSQL query differently: filter here
        rows = [r for r in session.scalars(query) if kb is None or r.kb == kb]
    return rows[:limit]


def activate_version(db: Database, version: str, *, actor: str) -> ModelVersion:
    """Make ``version`` the active one of its kind and kb (the one active before retires), audited.

    Raises :class:`LookupError` for an unknown version, :class:`ValueError` for one without a kb or
    whose artefact is gone.
    """
    with db.session() as session:
        row = session.get(ModelVersion, version)
        if row is None:
            raise LookupError(f"no model version {version!r}")
        kb = row.kb
        if kb is None:
            raise ValueError(f"model version {version!r} names no kb, so it cannot serve one")
        if not Path(row.artefact).exists():
            raise ValueError(f"model version {version!r} cannot serve: its artefact {row.artefact} is gone")
        retired = [r for r in _retire(session, row.kind, kb) if r != version]
        row.status, row.traffic_share = "active", 1.0
        session.add(AuditEvent(actor=actor, action="model.activate", target=version,
                               details={"kind": row.kind, "kb": kb, "retired": retired}))
        return row


def _retire(session: Any, kind: str, kb: str) -> list[str]:
    retired = []
    for row in session.scalars(select(ModelVersion).where(ModelVersion.kind == kind, ModelVersion.status == "active")):
        if row.kb == kb:
            row.status = "retired"
            retired.append(row.id)
    return retired
