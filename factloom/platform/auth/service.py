"""API keys: created with scopes, optionally limited to some kbs and to a lifetime, stored as SHA-256
hashes, checked on every ``/v1`` request; listed, revoked and rotated, each change audited.

A key reads ``fl_<prefix>_<secret>``; the prefix finds the row, the hash of the whole key proves it.
Keys are 192-bit random strings, so one fast hash suffices (a password KDF protects low-entropy input).
Each API process remembers the keys it verified for :data:`KEY_TTL_S` seconds (:class:`KeyCache`), so
a request with a key seen moments ago reads no ledger row; that is also how late a revocation made
through another process (or the CLI) can be.

Where a key may act is decided in one place, :class:`Principal`: its scopes (``has``) and its kbs
(``require_kb`` for one kb, ``visible_kbs`` for a listing). Neither the plaintext of a key nor its
hash is ever logged or listed; audit rows name a key by its id and name.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import select

from factloom.graph.store import KB_PATTERN
from factloom.ledger import ApiKey, AuditEvent, Database
from factloom.platform.errors import BadRequest, Conflict, Forbidden, Unauthorized, found

__all__ = [
    "SCOPES", "KEY_TTL_S", "MAX_KEY_DAYS", "Principal", "KeyCache", "KeyInfo", "create_key", "authenticate",
    "parse_scopes", "parse_kbs", "expiry", "describe", "get_key", "list_keys", "revoke_key", "rotate_key",
    "token_prefix", "key_hash",
]

# ``alerts``: Alertmanager posting to ``POST /v1/alerts`` (docs/operations.md, "Monitoring"), nothing else
SCOPES = ("ingest", "query", "review", "admin", "alerts")
# how long a verified key is trusted without reading the ledger again: a key revoked (or its scopes
# changed) in the ledger is refused within this many seconds
KEY_TTL_S = 5.0
# the longest lifetime a key may be given, in days (about ten years)
MAX_KEY_DAYS = 3660
# the most keys one API process remembers; the least recently used goes first
KEY_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as: a key's id and name, its scopes and the kbs it may touch (``None``:
    every kb), and when it expires (``None``: never)."""

    key_id: str
    name: str
    scopes: frozenset[str]
    kbs: frozenset[str] | None = None
    expires_at: datetime | None = None

    @property
    def actor(self) -> str:
        """How audit rows, decisions and feedback name this key: its name, and its id (rotation keeps
        the name)."""
        return f"key:{self.name[:150]}#{self.key_id}"

    def has(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    def require_kb(self, kb: str | None) -> str | None:
        """``kb`` when this key may read and write it, else :class:`Forbidden`. A key for every kb may
        touch anything, ``None`` (a row of no kb) included; a kb-limited key only its kbs."""
        if self.kbs is not None and kb not in self.kbs:
            raise Forbidden(f"this key is limited to kb(s) {', '.join(sorted(self.kbs))}; not {kb!r}",
                            kbs=sorted(self.kbs))
        return kb

    def visible_kbs(self, kb: str | None) -> frozenset[str] | None:
        """The kbs a listing filtered by ``kb`` (``None``: no filter) may show: ``{kb}`` once checked,
        else this key's kbs (``None``: all)."""
        if kb:
            self.require_kb(kb)
            return frozenset({kb})
        return self.kbs

    def require_all_kbs(self, what: str) -> None:
        """Refuse ``what`` to a kb-limited key: it must not make or see keys wider than itself."""
        if self.kbs is not None:
            raise Forbidden(f"{what} needs a key for every kb; this one is limited to {', '.join(sorted(self.kbs))}")


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """What may be shown of a stored key: never its secret or hash."""

    id: str
    name: str
    prefix: str
    scopes: list[str]
    kbs: list[str] | None
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def of(cls, row: ApiKey) -> KeyInfo:
        return cls(
            id=row.id, name=row.name, prefix=row.prefix, scopes=row.scopes.split(","),
            kbs=sorted(row.kbs) if row.kbs is not None else None, created_at=row.created_at,
            expires_at=row.expires_at if row.expires_at else None,
            revoked_at=row.revoked_at if row.revoked_at else None,
        )


def describe(key: KeyInfo) -> str:
    """One line about a key for people (the CLI): never its secret."""
    def when(moment: datetime | None) -> str:
        return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "never"

    state = f"revoked {when(key.revoked_at)}" if key.revoked_at else f"expires {when(key.expires_at)}"
    kbs = ",".join(key.kbs) if key.kbs is not None else "all kbs"
    return f"key {key.id}  fl_{key.prefix}_…  {key.name}  scopes {','.join(key.scopes)}  {kbs}  {state}"


def key_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_prefix(token: str) -> str | None:
    """The prefix of a well-formed ``fl_<prefix>_<secret>`` key, else ``None``."""
    parts = token.split("_")
    return parts[1] if len(parts) >= 3 and parts[0] == "fl" and parts[1] else None


def parse_scopes(text: str | list[str]) -> list[str]:
    items = text.split(",") if isinstance(text, str) else text
    scopes = [s.strip() for s in items if s.strip()]
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise BadRequest(f"unknown scope(s) {', '.join(unknown)}; known: {', '.join(SCOPES)}")
    if not scopes:
        raise BadRequest(f"at least one scope is needed; known: {', '.join(SCOPES)}")
    return scopes


def parse_kbs(text: str | Iterable[str] | None) -> list[str] | None:
    """The kbs of a key, sorted and once each; ``None`` (or nothing given) means every kb."""
    if text is None:
        return None
    items = text.split(",") if isinstance(text, str) else list(text)
    kbs = sorted({k.strip() for k in items if k.strip()})
    bad = [k for k in kbs if not KB_PATTERN.fullmatch(k)]
    if bad:
        raise BadRequest(f"not a kb name: {', '.join(map(repr, bad))}")
    if not kbs:
        raise BadRequest("a key limited to kbs needs at least one; leave kbs out for every kb")
    return kbs


def expiry(*, days: float | None = None, at: datetime | None = None) -> datetime | None:
    """When a key made now expires: ``days`` from now, or ``at`` (aware, in the future); ``None``: never."""
    if days is not None and at is not None:
        raise BadRequest("give expires_in_days or expires_at, not both")
    now = datetime.now(timezone.utc)
    if days is not None:
        if not 0 < days <= MAX_KEY_DAYS:
            raise BadRequest(f"a key expires in more than 0 and at most {MAX_KEY_DAYS} days")
        return now + timedelta(days=days)
    if at is not None:
        if at.tzinfo is None:
            raise BadRequest("expires_at needs a time zone")
        try:
            at = at.astimezone(timezone.utc)
        except (OverflowError, ValueError):  # 9999-12-31T23:59:59-14:00 lies past datetime's end in UTC
            raise BadRequest("expires_at is out of range") from None
        if at <= now:
            raise BadRequest("expires_at is in the past")
        return at
    return None


def _principal(row: ApiKey) -> Principal:
    return Principal(
        key_id=row.id, name=row.name, scopes=frozenset(row.scopes.split(",")),
        kbs=frozenset(row.kbs) if row.kbs is not None else None,
        expires_at=row.expires_at if row.expires_at else None,
    )


def _new_row(name: str, scopes: list[str], kbs: list[str] | None, expires_at: datetime | None) -> tuple[str, ApiKey]:
    prefix = secrets.token_hex(6)
    token = f"fl_{prefix}_{secrets.token_urlsafe(24)}"
    return token, ApiKey(name=name, prefix=prefix, key_hash=key_hash(token), scopes=",".join(scopes), kbs=kbs,
                         expires_at=expires_at)


def create_key(
    *, db: Database, name: str, scopes: list[str], kbs: list[str] | None = None,
    expires_at: datetime | None = None, actor: str = "system",
) -> tuple[str, Principal]:
    """Store a new key and return its plaintext (shown once) and principal; audited as ``key.create``
    by ``actor`` (``system``: made in-process, as the CLI's own key is)."""
    scopes = parse_scopes(scopes)
    kbs = parse_kbs(kbs)
    token, row = _new_row(name, scopes, kbs, expires_at)
    with db.session() as session:
        session.add(row)
        session.flush()
        session.add(AuditEvent(actor=actor, action="key.create", target=f"key:{row.id}", details={
            "name": name, "scopes": scopes, "kbs": kbs, "expires_at": expires_at.isoformat() if expires_at else None,
        }))
        return token, _principal(row)


def get_key(*, db: Database, key_id: str) -> KeyInfo:
    with db.session() as session:
        row = found(session.get(ApiKey, key_id), f"API key {key_id}")
        return KeyInfo.of(row)


def list_keys(*, db: Database, include_revoked: bool = False) -> list[KeyInfo]:
    """Every key, newest first; revoked ones only with ``include_revoked``."""
    query = select(ApiKey).order_by(ApiKey.created_at.desc(), ApiKey.id)
    if not include_revoked:
        query = query.where(ApiKey.revoked_at.is_(None))
    with db.session() as session:
        return [KeyInfo.of(row) for row in session.scalars(query)]


def revoke_key(*, db: Database, key_id: str, actor: str) -> KeyInfo:
    """Revoke a key from now on (API processes refuse it within :data:`KEY_TTL_S`); revoking a
    revoked key changes nothing and is not audited again."""
    with db.session() as session:
        row = found(session.get(ApiKey, key_id, with_for_update=True), f"API key {key_id}")
        if row.revoked_at is None:
            row.revoked_at = datetime.now(timezone.utc)
            session.add(AuditEvent(actor=actor, action="key.revoke", target=f"key:{row.id}",
                                   details={"name": row.name}))
        return KeyInfo.of(row)


def rotate_key(*, db: Database, key_id: str, actor: str, expires_at: datetime | None = None) -> tuple[str, KeyInfo]:
    """A new secret for a key: a new key of the same name, scopes and kbs (and expiry, unless
    ``expires_at`` is given), and the old one revoked, in one transaction. Returns the new key's
    plaintext (shown once) and what may be shown of it."""
    now = datetime.now(timezone.utc)
    with db.session() as session:
        old = found(session.get(ApiKey, key_id, with_for_update=True), f"API key {key_id}")
        if old.revoked_at is not None:
            raise Conflict(f"API key {key_id} is revoked; create a new one")
        if old.expires_at is not None and old.expires_at <= now:
            raise Conflict(f"API key {key_id} has expired; create a new one")
        token, row = _new_row(old.name, old.scopes.split(","), old.kbs,
                              expires_at or (old.expires_at if old.expires_at else None))
        old.revoked_at = now
        session.add(row)
        session.flush()
        session.add(AuditEvent(actor=actor, action="key.rotate", target=f"key:{old.id}", details={
            "name": old.name, "new_key": row.id, "expires_at": row.expires_at.isoformat() if row.expires_at else None,
        }))
        return token, KeyInfo.of(row)


class KeyCache:
    """The keys one process verified in the last ``ttl`` seconds, by the hash of the key, at most
    ``size`` of them (the least recently used goes first). Only verified keys are kept: an unknown
    key is looked up in the ledger every time, so a key created a moment ago works at once. An entry
    lives ``ttl`` seconds, or until its key expires if that is sooner."""

    def __init__(self, ttl: float = KEY_TTL_S, size: int = KEY_CACHE_SIZE) -> None:
        self._ttl, self._size = ttl, size
        self._keys: OrderedDict[str, tuple[float, Principal]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, token: str) -> Principal | None:
        digest = key_hash(token)
        with self._lock:
            hit = self._keys.get(digest)
            if hit is None:
                return None
            if time.monotonic() >= hit[0]:
                del self._keys[digest]
                return None
            self._keys.move_to_end(digest)
            return hit[1]

    def put(self, token: str, principal: Principal) -> None:
        ttl = self._ttl
        if principal.expires_at is not None:
            ttl = min(ttl, (principal.expires_at - datetime.now(timezone.utc)).total_seconds())
        if ttl <= 0:
            return
        digest = key_hash(token)
        with self._lock:
            self._keys[digest] = (time.monotonic() + ttl, principal)
            self._keys.move_to_end(digest)
            while len(self._keys) > self._size:
                self._keys.popitem(last=False)

    def forget(self, key_id: str) -> None:
        """Drop a key (revoked or rotated through this process) at once rather than at its TTL."""
        with self._lock:
            for digest in [d for d, (_, p) in self._keys.items() if p.key_id == key_id]:
                del self._keys[digest]

    def __len__(self) -> int:
        return len(self._keys)


def authenticate(*, db: Database, token: str) -> Principal:
    prefix = token_prefix(token)
    if prefix is None:
        raise Unauthorized("malformed API key; expected 'Authorization: Bearer fl_…'")
    with db.session() as session:
        row = session.scalar(select(ApiKey).where(ApiKey.prefix == prefix))
        if row is None or row.revoked_at is not None or not hmac.compare_digest(row.key_hash, key_hash(token)):
            raise Unauthorized("unknown or revoked API key")
        if row.expires_at is not None and row.expires_at <= datetime.now(timezone.utc):
            raise Unauthorized("this API key has expired")
        return _principal(row)
