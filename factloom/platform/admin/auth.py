"""Who is signed in, what their role allows, and the CSRF check every admin POST goes through.

Pages declare what they need with an ``Annotated`` alias: ``Reviewer`` (any signed-in account,
admins included) or ``AdminOnly``. The dependency looks the cookie's sign-in and its account up on
every request, so a sign-out, a password change, a disabled account or a changed role takes effect
at once; for a ``POST`` it also checks the form's (or the ``X-CSRF-Token`` header's) token against
the session's before the route runs.
Failures raise the errors below, which :class:`~factloom.platform.admin.render.AdminRoute` turns
into a sign-in redirect or an HTML (or, under ``/admin/api``, a problem+json) answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from factloom.platform.admin.security import SESSION_COOKIE, csrf_ok, session_data, unsign
from factloom.platform.admin.users import ROLES, User, signed_in_user
from factloom.platform.deps import ResourcesDep

__all__ = [
    "AdminSession", "SignInRequired", "RoleRequired", "CsrfFailed", "role_allows", "load_session",
    "require_role", "Reviewer", "AdminOnly", "CSRF_FIELD", "CSRF_HEADER",
]

CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
# what each role may do, widest last: an admin may do whatever a reviewer may
_RANK = {role: i for i, role in enumerate(ROLES)}


class SignInRequired(Exception):
    """No valid session: the cookie is missing, forged or expired, its sign-in was revoked, or its account
    is disabled."""


class RoleRequired(Exception):
    """Signed in, but the account's role is below what the page needs."""

    def __init__(self, needed: str, have: str) -> None:
        super().__init__(f"this page needs the '{needed}' role; you are signed in as a {have}")
        self.needed, self.have = needed, have


class CsrfFailed(Exception):
    """A POST without the session's CSRF token (a forged cross-site form, or a stale page)."""


@dataclass(frozen=True, slots=True)
class AdminSession:
    user: User
    csrf: str
    sign_in_id: str

    @property
    def actor(self) -> str:
        """How decisions and audit events name this person."""
        return f"user:{self.user.name}"


def role_allows(have: str, needed: str) -> bool:
    """Whether an account of role ``have`` may use what needs ``needed``; unknown roles may nothing."""
    return have in _RANK and needed in _RANK and _RANK[have] >= _RANK[needed]


def load_session(request: Request, resources: ResourcesDep) -> AdminSession | None:
    """The signed-in account of this request, or ``None``."""
    data = session_data(unsign(resources.settings.admin_key(), request.cookies.get(SESSION_COOKIE)))
    if data is None:
        return None
    user = signed_in_user(db=resources.db, sign_in_id=data.sign_in_id)
    return None if user is None else AdminSession(user=user, csrf=data.csrf, sign_in_id=data.sign_in_id)


def require_role(role: str) -> Callable[..., Awaitable[AdminSession]]:
    if role not in _RANK:
        raise ValueError(f"unknown role {role!r}")

    async def dependency(request: Request, resources: ResourcesDep) -> AdminSession:
        # the sign-in lookup is blocking SQL: on a worker thread, not on the event loop
        session = await run_in_threadpool(load_session, request, resources)
        if session is None:
            raise SignInRequired()
        request.state.admin = session  # the page layout shows who is signed in, even on a 403
        if not role_allows(session.user.role, role):
            raise RoleRequired(role, session.user.role)
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            given = request.headers.get(CSRF_HEADER)
            if given is None and request.headers.get("content-type", "").startswith(
                    ("application/x-www-form-urlencoded", "multipart/form-data")):
                value = (await request.form()).get(CSRF_FIELD)
                given = value if isinstance(value, str) else None
            if not csrf_ok(session.csrf, given):
                raise CsrfFailed()
        return session

    return dependency


Reviewer = Annotated[AdminSession, Depends(require_role("reviewer"))]
AdminOnly = Annotated[AdminSession, Depends(require_role("admin"))]
