"""Admin-UI accounts and their sign-ins.

Passwords are scrypt-hashed with a per-user salt; roles are ``reviewer`` and ``admin``. A sign-in is a
row (:class:`~factloom.ledger.tables.SignIn`) that the session cookie names: signing out revokes it,
and a password change or disabling the account revokes every sign-in of the account, so a copied
cookie stops working the moment its row does.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from factloom.ledger import AuditEvent, Database
from factloom.ledger.tables import SignIn, UserAccount, utcnow
from factloom.platform.errors import BadRequest, Conflict, found

__all__ = [
    "ROLES", "User", "hash_password", "verify_password", "create_user", "check_login",
    "list_users", "set_disabled", "set_password", "open_sign_in", "signed_in_user", "sign_out",
]

ROLES = ("reviewer", "admin")
N, R, P = 2**14, 8, 1  # scrypt cost: ~16 MiB and some tens of ms per check (RFC 7914 §2)
NAME_MAX = 200


@dataclass(frozen=True, slots=True)
class User:
    id: str
    name: str
    role: str
    created_at: datetime
    disabled_at: datetime | None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def may(self, role: str) -> bool:
        """Admins may do whatever reviewers may."""
        return self.role == "admin" or self.role == role


def _user(row: UserAccount) -> User:
    return User(id=row.id, name=row.name, role=row.role, created_at=row.created_at, disabled_at=row.disabled_at)


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


# a fixed hash to check against when the name is unknown, so both failures take the same time
_DUMMY = hash_password(secrets.token_hex(16))


def _check_password(password: str) -> None:
    if len(password) < 8:
        raise BadRequest("a password needs at least 8 characters")


def create_user(*, db: Database, name: str, role: str, password: str, actor: str = "cli") -> str:
    """Store a new account and return its id."""
    name = name.strip()
    if role not in ROLES:
        raise BadRequest(f"unknown role {role!r}; known: {', '.join(ROLES)}")
    if not name or len(name) > NAME_MAX or any(c.isspace() for c in name):
        raise BadRequest(f"a user name is 1 to {NAME_MAX} characters without spaces")
    _check_password(password)
    with db.session() as session:
        if session.scalar(select(UserAccount).where(UserAccount.name == name)) is not None:
            raise Conflict(f"user {name!r} exists")
        row = UserAccount(name=name, role=role, password_hash=hash_password(password))
        session.add(row)
        session.flush()
        session.add(AuditEvent(actor=actor, action="user.create", target=f"user:{name}", details={"role": role}))
        return row.id


def check_login(*, db: Database, name: str, password: str) -> User | None:
    """The account when name and password match an enabled user, else None."""
    with db.session() as session:
        row = session.scalar(select(UserAccount).where(UserAccount.name == name.strip()))
        if row is None:
            verify_password(password, _DUMMY)
            return None
        if not verify_password(password, row.password_hash) or row.disabled_at is not None:
            return None
        return _user(row)


def list_users(*, db: Database) -> list[User]:
    with db.session() as session:
        return [_user(r) for r in session.scalars(select(UserAccount).order_by(UserAccount.name))]


def set_disabled(*, db: Database, name: str, disabled: bool, actor: str) -> User:
    with db.session() as session:
        row = found(session.scalar(select(UserAccount).where(UserAccount.name == name)), f"user {name!r}")
        row.disabled_at = utcnow() if disabled else None
        if disabled:
            _revoke_all(session, row.id)
        session.add(AuditEvent(actor=actor, action="user.disable" if disabled else "user.enable",
                               target=f"user:{name}", details=None))
        session.flush()
        return _user(row)


def set_password(*, db: Database, name: str, password: str, actor: str) -> User:
    """Give the account a new password and end every sign-in it has."""
    _check_password(password)
    with db.session() as session:
        row = found(session.scalar(select(UserAccount).where(UserAccount.name == name)), f"user {name!r}")
        row.password_hash = hash_password(password)
        ended = _revoke_all(session, row.id)
        session.add(AuditEvent(actor=actor, action="user.password", target=f"user:{name}",
                               details={"sign_ins_ended": ended}))
        session.flush()
        return _user(row)


def open_sign_in(*, db: Database, user_id: str, hours: float) -> str:
    """A new sign-in of the account, valid for ``hours``; its id goes into the session cookie."""
    token = secrets.token_urlsafe(32)
    with db.session() as session:
        session.add(SignIn(id=token, user_id=user_id, expires_at=utcnow() + timedelta(hours=hours)))
    return token


def signed_in_user(*, db: Database, sign_in_id: str) -> User | None:
    """The enabled account of a sign-in that is neither revoked nor expired, else None."""
    with db.session() as session:
        row = session.scalar(
            select(UserAccount).join(SignIn, SignIn.user_id == UserAccount.id)
            .where(SignIn.id == sign_in_id, SignIn.revoked_at.is_(None), SignIn.expires_at > utcnow(),
                   UserAccount.disabled_at.is_(None))
        )
        return None if row is None else _user(row)


def sign_out(*, db: Database, sign_in_id: str) -> None:
    with db.session() as session:
        session.execute(update(SignIn).where(SignIn.id == sign_in_id, SignIn.revoked_at.is_(None))
                        .values(revoked_at=utcnow()))


def _revoke_all(session: Session, user_id: str) -> int:
    result = session.execute(update(SignIn).where(SignIn.user_id == user_id, SignIn.revoked_at.is_(None))
                             .values(revoked_at=utcnow()))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
