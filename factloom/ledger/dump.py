"""The ledger's rows as plain JSON values, table by table, and back: what ``factloom backup`` writes.

Plain values so that a backup taken from SQLite restores into PostgreSQL and the other way round:
datetimes as ISO 8601 text, enums as their values. Tables come in :attr:`Base.metadata.sorted_tables`
order (a table after the tables it refers to), and restore writes them in that order in one
transaction, into a ledger that holds no rows yet.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, Enum, Integer, Table, func, insert, select, text

from factloom.ledger.db import Database
from factloom.ledger.tables import Base, UtcDateTime

__all__ = ["TABLES", "dump_table", "restore_tables", "row_counts"]

TABLES: tuple[Table, ...] = tuple(Base.metadata.sorted_tables)
_BATCH = 1000


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    return value


def dump_table(db: Database, table: Table) -> Iterator[dict[str, Any]]:
    """Every row of ``table`` as plain JSON values, streamed."""
    with db.engine.connect() as connection:
        result = connection.execution_options(yield_per=_BATCH).execute(select(table))
        for row in result.mappings():
            yield {key: _plain(value) for key, value in row.items()}


def _typed(table: Table) -> Callable[[dict[str, Any]], dict[str, Any]]:
    converters: dict[str, Callable[[Any], Any]] = {}
    for column in table.columns:
        if isinstance(column.type, UtcDateTime | DateTime):
            converters[column.name] = datetime.fromisoformat
        elif isinstance(column.type, Enum) and column.type.enum_class is not None:
            converters[column.name] = column.type.enum_class
    return lambda row: {k: (converters[k](v) if v is not None and k in converters else v) for k, v in row.items()}


def row_counts(db: Database) -> dict[str, int]:
    with db.engine.connect() as connection:
        return {t.name: int(connection.execute(select(func.count()).select_from(t)).scalar_one()) for t in TABLES}


def restore_tables(db: Database, rows_of: Callable[[Table], Iterable[dict[str, Any]]], expected: dict[str, int],
                   on_rows: Callable[[str, int], None] = lambda _table, _n: None) -> None:
    """Insert every table's rows (``rows_of(table)``) into an empty ledger, all in one transaction,
    which rolls back unless each table got the ``expected`` number of rows (ValueError).
    ``on_rows(table, n)`` after each batch, for a progress bar."""
    written: dict[str, int] = {}
    with db.engine.begin() as connection:
        for table in TABLES:
            typed = _typed(table)
            batch: list[dict[str, Any]] = []
            written[table.name] = 0
            for row in rows_of(table):
                batch.append(typed(row))
                if len(batch) == _BATCH:
                    connection.execute(insert(table), batch)
                    written[table.name] += len(batch)
                    on_rows(table.name, len(batch))
                    batch = []
            if batch:
                connection.execute(insert(table), batch)
                written[table.name] += len(batch)
                on_rows(table.name, len(batch))
            if written[table.name] != expected.get(table.name, 0):
                raise ValueError(f"table {table.name}: {written[table.name]} rows read where "
                                 f"{expected.get(table.name, 0)} were expected")
            if connection.dialect.name == "postgresql":  # explicit ids leave the sequences behind
                for column in table.primary_key.columns:
                    if isinstance(column.type, Integer) and column.autoincrement in (True, "auto"):
                        connection.execute(text(
                            f"SELECT setval(pg_get_serial_sequence('{table.name}', '{column.name}'), "  # noqa: S608 - names from our own table metadata
                            f"coalesce(max({column.name}), 0) + 1, false) FROM {table.name}"))
