"""The model registry: ``model_version`` rows, one ``active`` version per kind and kb.

Serving reads the active versions (the API's query engine and the check workers, each within a few
seconds), so registering or activating a version swaps it in without a restart, and activating an
older one rolls back.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from factloom.ledger.db import Database
from factloom.ledger.tables import AuditEvent, ModelVersion, VersionStatus

__all__ = ["active_versions", "active_version", "register_version", "find_update", "start_update", "note_progress",
           "finish_update", "list_versions", "activate_version"]


def active_versions(db: Database, kinds: Iterable[str]) -> dict[tuple[str, str], tuple[str, str]]:
    """``(kind, kb) → (version, artefact)`` of every active version of ``kinds``, in one query;
    where a kb has several active versions of a kind, the newest wins. Rows without a kb are skipped."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    with db.session() as session:
        rows = session.execute(
            select(ModelVersion.id, ModelVersion.kind, ModelVersion.kb, ModelVersion.artefact)
            .where(ModelVersion.kind.in_(list(kinds)), ModelVersion.status == VersionStatus.active.value,
                   ModelVersion.kb.is_not(None))
            .order_by(ModelVersion.created_at.desc())
        ).all()
    for version, kind, kb, artefact in rows:
        out.setdefault((kind, str(kb)), (version, artefact))
    return out


def register_version(db: Database, *, kind: str, kb: str, artefact: Path, metrics: dict[str, Any],
                     parent: str | None = None, watermark: datetime | None = None,
                     gates: dict[str, Any] | None = None, activate: bool = True) -> str:
    """Register ``artefact`` as a ``kind`` for ``kb``: the active one (the previous active one retires),
    or with ``activate=False`` a ``candidate`` that serves nothing."""
    version = _new_id(kind, kb)
    with db.session() as session:
        if activate:
            _retire(session, kind, kb)
        session.add(ModelVersion(
            id=version, kind=kind, kb=kb, artefact=str(artefact), metrics=metrics, gates=gates or {},
            status=(VersionStatus.active if activate else VersionStatus.candidate).value,
            traffic_share=1.0 if activate else 0.0, parent=parent, watermark=watermark))
    return version


def _update_rows(session: Any, kind: str, kb: str, parent: str | None, watermark: datetime) -> list[ModelVersion]:
    return list(session.scalars(select(ModelVersion).where(
        ModelVersion.kind == kind, ModelVersion.kb == kb, ModelVersion.watermark == watermark,
        ModelVersion.parent.is_(None) if parent is None else ModelVersion.parent == parent)))


def find_update(db: Database, *, kind: str, kb: str, parent: str | None, watermark: datetime) -> ModelVersion | None:
    """The finished version already learned from ``parent`` up to ``watermark``, if any: an update is
    idempotent. One still in progress (or whose worker died) is not finished: it has no gate result."""
    with db.session() as session:
        return next((r for r in _update_rows(session, kind, kb, parent, watermark) if "passed" in (r.gates or {})),
                    None)


def start_update(db: Database, *, kind: str, kb: str, parent: str, watermark: datetime, artefact: Path) -> str:
    """The ``candidate`` row an update from ``parent`` up to ``watermark`` reports its progress in
    (``metrics["progress"]``) until :func:`finish_update`; an unfinished one of the same update (its
    worker died) is taken over. ``artefact`` is where the candidate will be saved: until it is, the
    row cannot be activated."""
    with db.session() as session:
        unfinished = [r for r in _update_rows(session, kind, kb, parent, watermark) if "passed" not in (r.gates or {})]
        if unfinished:
            row = unfinished[0]
            row.artefact, row.metrics = str(artefact), {"progress": "restarted"}
            return row.id
        version = _new_id(kind, kb)
        session.add(ModelVersion(id=version, kind=kind, kb=kb, artefact=str(artefact), metrics={"progress": "started"},
                                 gates={}, status=VersionStatus.candidate.value, traffic_share=0.0, parent=parent,
                                 watermark=watermark))
    return version


def note_progress(db: Database, version: str, progress: str) -> None:
    """What the update behind ``version`` is doing now, for ``factloom models list`` and the admin UI."""
    with db.session() as session:
        row = session.get(ModelVersion, version)
        if row is not None:
            row.metrics = {**(row.metrics or {}), "progress": progress}


def finish_update(db: Database, version: str, *, metrics: dict[str, Any], gates: dict[str, Any]) -> None:
    """Record the update's figures and gates; a candidate that passed becomes the active version
    (the previous active one retires), one that failed stays a ``candidate``."""
    with db.session() as session:
        row = session.get(ModelVersion, version)
        if row is None:
            raise LookupError(f"no model version {version!r}")
        row.metrics, row.gates = metrics, gates
        if gates.get("passed"):
            assert row.kb is not None
            retired = _retire(session, row.kind, row.kb)
            row.status, row.traffic_share = VersionStatus.active.value, 1.0
            session.add(AuditEvent(actor="learner", action="model.promote", target=version,
                                   details={"kind": row.kind, "kb": row.kb, "retired": retired, "gates": gates}))


def _new_id(kind: str, kb: str) -> str:
    return f"{kind}-{kb}-{time.strftime('%Y%m%d%H%M%S')}-{random.randrange(16**4):04x}"


def active_version(db: Database, *, kind: str, kb: str) -> ModelVersion | None:
    """The row of ``kind``'s active version for ``kb`` (the newest where several are)."""
    with db.session() as session:
        return session.scalars(select(ModelVersion).where(
            ModelVersion.kind == kind, ModelVersion.kb == kb, ModelVersion.status == VersionStatus.active.value,
        ).order_by(ModelVersion.created_at.desc())).first()


def list_versions(db: Database, *, kind: str | None = None, kb: str | None = None,
                  limit: int = 100) -> list[ModelVersion]:
    """The newest ``limit`` versions, of one ``kind`` and one ``kb`` where given."""
    query = select(ModelVersion).order_by(ModelVersion.created_at.desc()).limit(limit)
    if kind is not None:
        query = query.where(ModelVersion.kind == kind)
    if kb is not None:
        query = query.where(ModelVersion.kb == kb)
    with db.session() as session:
        return list(session.scalars(query))


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
        row.status, row.traffic_share = VersionStatus.active.value, 1.0
        session.add(AuditEvent(actor=actor, action="model.activate", target=version,
                               details={"kind": row.kind, "kb": kb, "retired": retired}))
        return row


def _retire(session: Any, kind: str, kb: str) -> list[str]:
    retired = []
    for row in session.scalars(select(ModelVersion).where(
            ModelVersion.kind == kind, ModelVersion.kb == kb, ModelVersion.status == VersionStatus.active.value)):
        row.status = VersionStatus.retired.value
        retired.append(row.id)
    return retired
