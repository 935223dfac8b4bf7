"""Admin-UI accounts on a real (migrated SQLite) ledger."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect

from factloom.ledger import Database
from factloom.platform.admin.users import check_login, create_user, hash_password, verify_password
from factloom.platform.errors import BadRequest, Conflict
from factloom.platform.migrate import migrate_sql


@pytest.fixture()
def ledger(tmp_path: Path) -> Database:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    migrate_sql(url)
    db = Database(url)
    assert "user_account" in inspect(db.engine).get_table_names()
    return db


def test_hash_is_salted_and_verifies() -> None:
    a, b = hash_password("correct horse"), hash_password("correct horse")
    assert a != b and a.startswith("scrypt$")
    assert verify_password("correct horse", a) and not verify_password("wrong horse", a)
    assert not verify_password("x", "garbage")


def test_create_and_login(ledger: Database) -> None:
    create_user(db=ledger, name="ana", role="reviewer", password="s3cret-pass")
    assert check_login(db=ledger, name="ana", password="s3cret-pass") is not None
    assert check_login(db=ledger, name="ana", password="nope-nope") is None
    assert check_login(db=ledger, name="bob", password="s3cret-pass") is None
    with pytest.raises(Conflict):
        create_user(db=ledger, name="ana", role="admin", password="another-pass")
    with pytest.raises(BadRequest):
        create_user(db=ledger, name="cy", role="root", password="another-pass")
