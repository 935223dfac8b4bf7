"""Admin-UI accounts: scrypt-hashed passwords with a per-user salt, roles ``reviewer`` and ``admin``."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select

from factloom.ledger import Database
from factloom.ledger.tables import UserAccount
from factloom.platform.errors import BadRequest, Conflict

__all__ = ["ROLES", "hash_password", "verify_password", "create_user", "check_login"]

ROLES = ("reviewer", "admin")
N, R, P = 2**14, 8, 1


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=N, r=R, p=P, dklen=32)
    return f"scrypt${N}${R}${P}${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        got = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p),
                             dklen=len(digest) // 2)
    except ValueError:
        return False
    return hmac.compare_digest(got.hex(), digest)


def create_user(*, db: Database, name: str, role: str, password: str) -> str:
    """Store a new account and return its id."""
    if role not in ROLES:
        raise BadRequest(f"unknown role {role!r}; known: {', '.join(ROLES)}")
    if not name.strip() or len(password) < 8:
        raise BadRequest("a user needs a name and a password of at least 8 characters")
    with db.session() as session:
        if session.scalar(select(UserAccount).where(UserAccount.name == name)) is not None:
            raise Conflict(f"user {name!r} exists")
        row = UserAccount(name=name, role=role, password_hash=hash_password(password))
        session.add(row)
        session.flush()
        return row.id


def check_login(*, db: Database, name: str, password: str) -> UserAccount | None:
    """The account when name and password match an enabled user, else None."""
    with db.session() as session:
        row = session.scalar(select(UserAccount).where(UserAccount.name == name))
        if row is None or row.disabled_at is not None or not verify_password(password, row.password_hash):
            return None
        return row
