"""Signed session cookies and CSRF tokens for the admin UI, on the standard library only.

A cookie value is ``base64url(json payload) "." base64url(HMAC-SHA256(key, payload))``. The payload
carries the id of a server-side sign-in, a random CSRF token and an expiry (no user, no role: those are
read from the sign-in's account); the signature makes it tamper-evident, and the server looks the
sign-in up on every request, so signing out, disabling a user or changing a role or password takes
effect at once. The CSRF token is the synchronizer-token pattern
(OWASP CSRF cheat sheet): every form carries the session's token and every POST must echo it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SessionData", "sign", "unsign", "new_session", "session_data", "csrf_ok", "SESSION_COOKIE", "LOGIN_COOKIE",
    "FLASH_COOKIE",
]

SESSION_COOKIE = "fl_session"
LOGIN_COOKIE = "fl_login"  # the pre-sign-in CSRF token of the login form (double-submit)
FLASH_COOKIE = "fl_flash"  # a signed one-shot message for the next page ("3 accepted")


@dataclass(frozen=True, slots=True)
class SessionData:
    sign_in_id: str
    csrf: str
    expires: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(key: bytes, payload: dict[str, Any]) -> str:
    body = _b64(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
    mac = hmac.new(key, body.encode(), hashlib.sha256).digest()
    return f"{body}.{_b64(mac)}"


def unsign(key: bytes, value: str | None, *, now: float | None = None) -> dict[str, Any] | None:
    """The payload of a value :func:`sign` made with ``key`` and not yet expired, else ``None``."""
    if not value or value.count(".") != 1:
        return None
    body, mac = value.split(".")
    expected = _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())
    if not hmac.compare_digest(mac, expected):
        return None
    try:
        payload = json.loads(_unb64(body))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(payload, dict):
        return None
    expires = payload.get("exp")
    if not isinstance(expires, int | float) or expires < (time.time() if now is None else now):
        return None
    return payload


def new_session(sign_in_id: str, hours: float, *, now: float | None = None) -> dict[str, Any]:
    start = time.time() if now is None else now
    return {"sid": sign_in_id, "csrf": secrets.token_urlsafe(24), "exp": start + hours * 3600.0}


def session_data(payload: dict[str, Any] | None) -> SessionData | None:
    if payload is None or not isinstance(payload.get("sid"), str) or not isinstance(payload.get("csrf"), str):
        return None
    return SessionData(sign_in_id=payload["sid"], csrf=payload["csrf"], expires=float(payload["exp"]))


def csrf_ok(expected: str | None, given: str | None) -> bool:
    return bool(expected) and bool(given) and hmac.compare_digest(str(expected), str(given))
