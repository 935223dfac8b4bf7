"""API keys: created with scopes, stored as SHA-256 hashes, checked on every ``/v1`` request.

A key reads ``fl_<prefix>_<secret>``; the prefix finds the row, the hash of the whole key proves it.
Keys are 192-bit random strings, so one fast hash suffices (a password KDF protects low-entropy input).
Each API process remembers the keys it verified for :data:`KEY_TTL_S` seconds (:class:`KeyCache`), so
a request with a key seen moments ago reads no ledger row.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from sqlalchemy import select

from factloom.ledger import ApiKey, Database
from factloom.platform.errors import BadRequest, Unauthorized

__all__ = ["SCOPES", "KEY_TTL_S", "Principal", "KeyCache", "create_key", "authenticate", "parse_scopes"]

SCOPES = ("ingest", "query", "review", "admin")
# how long a verified key is trusted without reading the ledger again: a key revoked (or its scopes
# changed) in the ledger is refused within this many seconds
KEY_TTL_S = 5.0


@dataclass(frozen=True, slots=True)
class Principal:
    key_id: str
    name: str
    scopes: frozenset[str]

    def has(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_scopes(text: str | list[str]) -> list[str]:
    items = text.split(",") if isinstance(text, str) else text
    scopes = [s.strip() for s in items if s.strip()]
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise BadRequest(f"unknown scope(s) {', '.join(unknown)}; known: {', '.join(SCOPES)}")
    if not scopes:
        raise BadRequest(f"at least one scope is needed; known: {', '.join(SCOPES)}")
    return scopes


def create_key(*, db: Database, name: str, scopes: list[str]) -> tuple[str, Principal]:
    """Store a new key and return its plaintext (shown once) and principal."""
    scopes = parse_scopes(scopes)
    prefix = secrets.token_hex(6)
    token = f"fl_{prefix}_{secrets.token_urlsafe(24)}"
    with db.session() as session:
        row = ApiKey(name=name, prefix=prefix, key_hash=_hash(token), scopes=",".join(scopes))
        session.add(row)
        session.flush()
        return token, Principal(key_id=row.id, name=name, scopes=frozenset(scopes))


class KeyCache:
    """The keys one process verified in the last ``ttl`` seconds, by the hash of the key. Only
    verified keys are kept: an unknown key is looked up in the ledger every time, so a key created a
    moment ago works at once. At most ``size`` keys; when full it starts afresh."""

    def __init__(self, ttl: float = KEY_TTL_S, size: int = 4096) -> None:
        self._ttl, self._size = ttl, size
        self._keys: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def get(self, token: str) -> Principal | None:
        hit = self._keys.get(_hash(token))
        return hit[1] if hit is not None and time.monotonic() < hit[0] else None

    def put(self, token: str, principal: Principal) -> None:
        with self._lock:
            if len(self._keys) >= self._size:
                self._keys.clear()
            self._keys[_hash(token)] = (time.monotonic() + self._ttl, principal)


def authenticate(*, db: Database, token: str) -> Principal:
    parts = token.split("_")
    if len(parts) < 3 or parts[0] != "fl":
        raise Unauthorized("malformed API key; expected 'Authorization: Bearer fl_…'")
    with db.session() as session:
        row = session.scalar(select(ApiKey).where(ApiKey.prefix == parts[1]))
        if row is None or row.revoked_at is not None or not hmac.compare_digest(row.key_hash, _hash(token)):
            raise Unauthorized("unknown or revoked API key")
        return Principal(key_id=row.id, name=row.name, scopes=frozenset(row.scopes.split(",")))
