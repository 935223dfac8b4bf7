"""Paging through an append-only table newest first, as the audit trail and the alerts are read."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy import ColumnElement, select

from factloom.ledger.db import Database
from factloom.ledger.tables import Base

__all__ = ["newest_first"]

Row = TypeVar("Row", bound=Base)


def newest_first(db: Database, table: type[Row], *where: ColumnElement[bool], before: int | None, limit: int,
                 **equal: str | None) -> list[Row]:
    """One page of ``table``'s rows, newest first (by their ``id``, which grows with every row written):
    those meeting every condition in ``where`` and equal to each value in ``equal`` (a column's name
    and its value; an empty value narrows nothing); ``before`` pages on, past the row of that id."""
    columns = table.__table__.c
    query = select(table).where(*where, *(columns[name] == value for name, value in equal.items() if value))
    if before is not None:
        query = query.where(columns.id < before)
    with db.session() as session:
        return list(session.scalars(query.order_by(columns.id.desc()).limit(limit)).all())
