"""Sign-in, sign-out, the landing redirect and the static files (own and from npm) of the admin UI."""

from __future__ import annotations

import secrets
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import FileResponse

from factloom.platform.admin.auth import Reviewer, load_session
from factloom.platform.admin.render import PREFIX, WEB_DIR, AdminRoute, flash, redirect, render
from factloom.platform.admin.security import LOGIN_COOKIE, SESSION_COOKIE, csrf_ok, new_session, sign
from factloom.platform.admin.users import check_login, open_sign_in, sign_out
from factloom.platform.deps import ResourcesDep
from factloom.platform.errors import NotFound

__all__ = ["router", "safe_next", "VENDOR"]

router = APIRouter(prefix=PREFIX, route_class=AdminRoute, include_in_schema=False)

# the only files served from node_modules (installed by ``npm ci`` in scripts/setup.sh)
VENDOR = {"cytoscape.min.js": "cytoscape/dist/cytoscape.min.js"}
_STATIC_TYPES = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml", ".png": "image/png"}


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path inside the admin UI, never another site."""
    if not target:
        return f"{PREFIX}/queue"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith(f"{PREFIX}/") or "\\" in target \
            or parts.path.startswith(f"{PREFIX}/login"):
        return f"{PREFIX}/queue"
    return target


@router.get("")
@router.get("/")
def home() -> Response:
    return redirect(f"{PREFIX}/queue")


@router.get("/login")
def login_page(request: Request, resources: ResourcesDep, next: str = "") -> Response:
    if load_session(request, resources) is not None:
        return redirect(safe_next(next))
    token = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)
    response = render(request, "login.html", csrf=token, next=safe_next(next), error=None)
    response.set_cookie(LOGIN_COOKIE, token, max_age=3600, path=PREFIX, httponly=True, samesite="strict",
                        secure=resources.settings.admin_cookie_secure)
    return response


@router.post("/login")
def login(
    request: Request, resources: ResourcesDep, name: Annotated[str, Form(max_length=200)],
    password: Annotated[str, Form(max_length=1000)], csrf: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "",
) -> Response:
    settings = resources.settings
    token = request.cookies.get(LOGIN_COOKIE)
    if not csrf_ok(token, csrf):
        fresh = secrets.token_urlsafe(24)
        response = render(request, "login.html", status=403, csrf=fresh, next=safe_next(next), name=name,
                          error="The sign-in form expired. Please try again.")
        response.set_cookie(LOGIN_COOKIE, fresh, max_age=3600, path=PREFIX, httponly=True, samesite="strict",
                            secure=settings.admin_cookie_secure)
        return response
    throttle = resources.login_throttle
    wait = throttle.wait_s(name)
    if wait > 0:
        return render(request, "login.html", status=429, csrf=token, next=safe_next(next), name=name,
                      error=f"Too many failed attempts for this name; try again in {int(wait) + 1} s.")
    user = check_login(db=resources.db, name=name, password=password)
    if user is None:
        throttle.failed(name)
        return render(request, "login.html", status=401, csrf=token, next=safe_next(next), name=name,
                      error="Unknown name or wrong password (or the account is disabled).")
    throttle.succeeded(name)
    sign_in_id = open_sign_in(db=resources.db, user_id=user.id, hours=settings.admin_session_hours)
    value = sign(settings.admin_key(), new_session(sign_in_id, settings.admin_session_hours))
    done = redirect(safe_next(next))
    done.set_cookie(SESSION_COOKIE, value, max_age=int(settings.admin_session_hours * 3600), path=PREFIX,
                        httponly=True, samesite="lax", secure=settings.admin_cookie_secure)
    done.delete_cookie(LOGIN_COOKIE, path=PREFIX)
    return flash(request, done, f"Signed in as {user.name} ({user.role})")


@router.post("/logout")
def logout(request: Request, me: Reviewer, resources: ResourcesDep) -> Response:
    sign_out(db=resources.db, sign_in_id=me.sign_in_id)  # the cookie, replayed, no longer signs anyone in
    response = redirect(f"{PREFIX}/login")
    response.delete_cookie(SESSION_COOKIE, path=PREFIX)
    return flash(request, response, "Signed out")


@router.get("/static/{name}")
def static(name: str) -> Response:
    path = WEB_DIR / "static" / name
    if "/" in name or name.startswith(".") or path.suffix not in _STATIC_TYPES or not path.is_file():
        raise NotFound(f"no static file {name!r}")
    return FileResponse(path, media_type=_STATIC_TYPES[path.suffix], headers={"Cache-Control": "public, max-age=3600"})


@router.get("/vendor/{name}")
def vendor(name: str) -> Response:
    relative = VENDOR.get(name)
    path = WEB_DIR / "node_modules" / relative if relative else None
    if path is None or not path.is_file():
        raise NotFound(f"{name!r} is not installed; run scripts/setup.sh (it runs 'npm ci' in {WEB_DIR})")
    return FileResponse(path, media_type="text/javascript", headers={"Cache-Control": "public, max-age=86400"})
