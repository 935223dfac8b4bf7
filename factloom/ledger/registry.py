"""The model registry's active versions (``model_version`` rows with status ``active``)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select

from factloom.ledger.db import Database
from factloom.ledger.tables import ModelVersion

__all__ = ["active_versions"]


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
