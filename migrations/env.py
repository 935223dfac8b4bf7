"""Alembic environment: the URL comes from the caller (``factloom migrate``) or from Settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from factloom.config import get_settings
from factloom.ledger.tables import Base

config = context.config
url = config.get_main_option("sqlalchemy.url") or get_settings().sql_url
target_metadata = Base.metadata


def run_offline() -> None:
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        # batch mode lets later ALTERs run on SQLite too
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
