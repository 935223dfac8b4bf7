"""``factloom migrate``: the SQL ledger to Alembic head, then the Neo4j schema (both idempotent)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from factloom.config import Settings
from factloom.graph import Neo4jStore

__all__ = ["MIGRATIONS_DIR", "alembic_config", "migrate_sql", "migrate_graph", "migrate"]

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def migrate_sql(url: str) -> None:
    command.upgrade(alembic_config(url), "head")


def migrate_graph(settings: Settings) -> None:
    store = Neo4jStore(settings.neo4j_uri, settings.neo4j_auth())
    try:
        store.apply_schema()
    finally:
        store.close()


def migrate(settings: Settings) -> None:
    migrate_sql(settings.sql_url)
    migrate_graph(settings)
