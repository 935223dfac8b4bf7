"""The model registry: ``model_version`` rows, one ``active`` version per kind and kb.

Serving reads the active versions (the API's query engine and the check workers, each within a few
seconds), so registering or activating a version swaps it in without a restart, and activating an
older one rolls back.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from factloom.ledger.db import Database
from factloom.ledger.tables import AuditEvent, ModelVersion, VersionStatus

__all__ = ["active_versions", "active_version", "register_version", "find_update", "start_update", "note_progress",
           "finish_update", "list_versions", "activate_version", "Trial", "trial_versions", "start_trial",
           "end_trial", "rollback"]

TRIAL_MODES = (VersionStatus.shadow.value, VersionStatus.ab.value)


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


@dataclass(frozen=True)
class Trial:
    """A version on trial beside its kind's active one: ``mode`` ``shadow`` (answers compared, never
    returned) or ``ab`` (answers ``share`` of the kb's questions)."""

    version: str
    artefact: str
    mode: str
    share: float


def trial_versions(db: Database, kinds: Iterable[str]) -> dict[tuple[str, str], Trial]:
    """``(kind, kb) → Trial`` of every version of ``kinds`` on trial (the newest where several are)."""
    out: dict[tuple[str, str], Trial] = {}
    with db.session() as session:
        rows = session.execute(
            select(ModelVersion.id, ModelVersion.kind, ModelVersion.kb, ModelVersion.artefact, ModelVersion.status,
                   ModelVersion.traffic_share)
            .where(ModelVersion.kind.in_(list(kinds)), ModelVersion.status.in_(TRIAL_MODES),
                   ModelVersion.kb.is_not(None))
            .order_by(ModelVersion.created_at.desc())
        ).all()
    for version, kind, kb, artefact, status, share in rows:
        out.setdefault((kind, str(kb)), Trial(version, artefact, status, float(share or 0.0)))
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


def finish_update(db: Database, version: str, *, metrics: dict[str, Any], gates: dict[str, Any],
                  ab_share: float = 0.0) -> None:
    """Record the update's figures and gates; a candidate that passed becomes the active version
    (the previous active one retires) or, with ``ab_share``, goes on an A/B trial with that share;
    one that failed stays a ``candidate``."""
    with db.session() as session:
        row = _version(session, version)
        row.metrics, row.gates = metrics, gates
        if gates.get("passed") and ab_share:
            assert row.kb is not None
            for other in session.scalars(select(ModelVersion).where(
                    ModelVersion.kind == row.kind, ModelVersion.kb == row.kb, ModelVersion.status.in_(TRIAL_MODES))):
                other.status, other.traffic_share = VersionStatus.candidate.value, 0.0
            row.status, row.traffic_share = VersionStatus.ab.value, ab_share
            session.add(AuditEvent(actor="learner", action="model.ab", target=version,
                                   details={"kind": row.kind, "kb": row.kb, "share": ab_share, "gates": gates}))
        elif gates.get("passed"):
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
        row = _servable(session, version)
        kb = row.kb
        assert kb is not None
        retired = [r for r in _retire(session, row.kind, kb) if r != version]
        row.status, row.traffic_share = VersionStatus.active.value, 1.0
        session.add(AuditEvent(actor=actor, action="model.activate", target=version,
                               details={"kind": row.kind, "kb": kb, "retired": retired}))
        return row


def start_trial(db: Database, version: str, *, mode: str, share: float = 0.0, actor: str) -> ModelVersion:
    """Put ``version`` on trial beside its kind's active version: ``shadow``, or ``ab`` with
    ``share`` (0 < share < 1) of the kb's questions. A version already on trial for the kind and kb
    goes back to ``candidate``; audited.

    Raises :class:`LookupError` for an unknown version, :class:`ValueError` for the active one, one
    without a kb, one whose artefact is gone, a bad mode or share.
    """
    if mode not in TRIAL_MODES:
        raise ValueError(f"a trial is {' or '.join(TRIAL_MODES)}, not {mode!r}")
    if mode == VersionStatus.ab.value and not 0.0 < share < 1.0:
        raise ValueError(f"an A/B share is between 0 and 1 (exclusive), not {share}")
    with db.session() as session:
        row = _servable(session, version)
        if row.status == VersionStatus.active.value:
            raise ValueError(f"model version {version!r} is active already: nothing to try")
        assert row.kb is not None
        ended = []
        for other in session.scalars(select(ModelVersion).where(
                ModelVersion.kind == row.kind, ModelVersion.kb == row.kb, ModelVersion.status.in_(TRIAL_MODES),
                ModelVersion.id != version)):
            other.status, other.traffic_share = VersionStatus.candidate.value, 0.0
            ended.append(other.id)
        row.status, row.traffic_share = mode, share if mode == VersionStatus.ab.value else 0.0
        session.add(AuditEvent(actor=actor, action=f"model.{mode}", target=version,
                               details={"kind": row.kind, "kb": row.kb, "share": row.traffic_share, "ended": ended}))
        return row


def end_trial(db: Database, version: str, *, actor: str, reason: str = "stopped by hand") -> ModelVersion:
    """Take ``version`` off its trial (back to ``candidate``), audited with ``reason``; one not on
    trial: :class:`ValueError`."""
    with db.session() as session:
        row = _version(session, version)
        if row.status not in TRIAL_MODES:
            raise ValueError(f"model version {version!r} is {row.status}, not on trial")
        row.status, row.traffic_share = VersionStatus.candidate.value, 0.0
        session.add(AuditEvent(actor=actor, action="model.trial_end", target=version,
                               details={"kind": row.kind, "kb": row.kb, "reason": reason}))
        return row


def rollback(db: Database, *, kind: str, kb: str, actor: str, reason: str) -> tuple[str, str]:
    """Take ``kind``'s active version of ``kb`` off (``rolled_back``) and serve its last good one
    again: its parent where that can still serve, else the newest retired version that can; audited.
    Returns ``(taken off, now serving)``; :class:`LookupError` when nothing is active or nothing
    good is left to go back to."""
    with db.session() as session:
        current = session.scalars(select(ModelVersion).where(
            ModelVersion.kind == kind, ModelVersion.kb == kb, ModelVersion.status == VersionStatus.active.value,
        ).order_by(ModelVersion.created_at.desc())).first()
        if current is None:
            raise LookupError(f"kb {kb!r} has no active {kind} to roll back")
        retired = list(session.scalars(select(ModelVersion).where(
            ModelVersion.kind == kind, ModelVersion.kb == kb, ModelVersion.status == VersionStatus.retired.value,
        ).order_by(ModelVersion.created_at.desc())))
        good = [r for r in retired if Path(r.artefact).exists()]
        target = next((r for r in good if r.id == current.parent), good[0] if good else None)
        if target is None:
            raise LookupError(f"kb {kb!r} has no earlier {kind} that can serve: nothing to roll back to")
        _retire(session, kind, kb)
        current.status, current.traffic_share = VersionStatus.rolled_back.value, 0.0
        target.status, target.traffic_share = VersionStatus.active.value, 1.0
        session.add(AuditEvent(actor=actor, action="model.rollback", target=current.id,
                               details={"kind": kind, "kb": kb, "to": target.id, "reason": reason}))
        return current.id, target.id


def _version(session: Session, version: str) -> ModelVersion:
    row = session.get(ModelVersion, version)
    if row is None:
        raise LookupError(f"no model version {version!r}")
    return row


def _servable(session: Any, version: str) -> ModelVersion:
    row = _version(session, version)
    if row.kb is None:
        raise ValueError(f"model version {version!r} names no kb, so it cannot serve one")
    if not Path(row.artefact).exists():
        raise ValueError(f"model version {version!r} cannot serve: its artefact {row.artefact} is gone")
    return row


def _retire(session: Any, kind: str, kb: str) -> list[str]:
    retired = []
    for row in session.scalars(select(ModelVersion).where(
            ModelVersion.kind == kind, ModelVersion.kb == kb, ModelVersion.status == VersionStatus.active.value)):
        row.status = VersionStatus.retired.value
        retired.append(row.id)
    return retired
