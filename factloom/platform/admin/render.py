"""Server-side rendering of the admin UI: the Jinja2 environment, flash messages, error pages.

:class:`AdminRoute` is the route class of every admin route. It catches what the auth dependency
and the services raise and answers the way a browser expects: a sign-in redirect for a ``GET``
without a session, an HTML page with the right status otherwise, and ``application/problem+json``
for the JSON endpoints under ``/admin/api`` that the page scripts call.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Coroutine
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from factloom.graph.errors import GraphUnavailable, InvalidGraphInput
from factloom.ledger.evidence import IMAGE_TYPES, image_path
from factloom.ledger.tables import as_utc
from factloom.platform.admin.auth import AdminSession, CsrfFailed, RoleRequired, SignInRequired
from factloom.platform.admin.security import FLASH_COOKIE, sign, unsign
from factloom.platform.errors import NotFound, PlatformError

__all__ = ["WEB_DIR", "PREFIX", "AdminRoute", "render", "redirect", "flash", "environment", "ago", "when",
           "neutralise_bidi", "evidence_image"]

log = logging.getLogger(__name__)

WEB_DIR = Path(__file__).resolve().parents[1] / "web"
PREFIX = "/admin"
API_PREFIX = "/admin/api/"


def ago(value: datetime | None, now: datetime | None = None) -> str:
    """'3 min ago' style age of a UTC timestamp (naive ones are UTC, as the ledger writes them)."""
    if value is None:
        return "—"
    now = now or datetime.now(timezone.utc)
    seconds = (now - as_utc(value)).total_seconds()
    if seconds < 0:
        return "in the future"
    for size, unit in ((86400 * 365, "y"), (86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "just now"


def when(value: datetime | None) -> str:
    if value is None:
        return "—"
    return as_utc(value).strftime("%Y-%m-%d %H:%M UTC")


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


# the invisible characters that reorder the text around them (Unicode UAX #9): embeddings, overrides,
# isolates and marks; a name carrying one could read backwards ("evil" shown as "live")
_BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def neutralise_bidi(text: str) -> str:
    """``text`` with each bidirectional control character shown as its code point, e.g. ``[U+202E]``."""
    return _BIDI_CONTROLS.sub(lambda m: f"[U+{ord(m.group()):04X}]", text)


class Verbatim(str):
    """A value that must reach the browser unchanged (a form field that is sent back): escaped, not neutralised."""


def _finalize(value: Any) -> Any:
    # every ``{{ … }}`` of every page passes here before it is escaped
    if isinstance(value, Verbatim) or not isinstance(value, str):
        return value
    if isinstance(value, Markup):  # already safe; the code point labels add no markup
        return Markup(neutralise_bidi(value))  # noqa: S704
    return neutralise_bidi(value)


def _tojson_attr(value: Any) -> Markup:
    """JSON for a ``<script type="application/json">`` block: ``<``, ``>``, ``&`` escaped."""
    text = neutralise_bidi(json.dumps(value, default=str, ensure_ascii=False))
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(text)  # noqa: S704 - the three characters that could end the block are escaped


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(WEB_DIR / "templates")),
        autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True, finalize=_finalize,
    )
    env.filters.update(ago=ago, when=when, pct=_pct, jsonblock=_tojson_attr, short=lambda s: (s or "")[:8],
                       urlq=lambda s: quote(str(s), safe=""), verbatim=lambda s: Verbatim("" if s is None else s))
    env.globals.update(prefix=PREFIX)
    return env


def _static_version() -> str:
    # a changed stylesheet or script gets a new URL, so a browser never runs a stale one
    files = sorted((WEB_DIR / "static").glob("*"))
    return str(int(max((f.stat().st_mtime for f in files), default=0)))


def render(request: Request, template: str, *, status: int = 200, **context: Any) -> HTMLResponse:
    me: AdminSession | None = getattr(request.state, "admin", None)
    message = _take_flash(request)
    html = environment().get_template(template).render(
        request=request, me=me, flash=message, path=request.url.path, static_v=_static_version(), **context,
    )
    response = HTMLResponse(html, status_code=status)
    # pages show ledger state: never serve a stale copy from the back/forward cache of a shared proxy
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"
    )
    if message is not None:
        response.delete_cookie(FLASH_COOKIE, path=PREFIX)
    return response


def evidence_image(evidence_dir: Path, evidence: dict[str, Any] | None, what: str) -> FileResponse:
    """The evidence image stored with a claim (``what`` names it in the 404s), served as itself only."""
    image = (evidence or {}).get("image")
    if not isinstance(image, dict) or image.get("content_type") not in IMAGE_TYPES:
        raise NotFound(f"{what} has no evidence image")
    path = image_path(evidence_dir, str(image.get("sha256")), str(image["content_type"]))
    if not path.is_file():
        raise NotFound(f"the evidence image of {what} is missing from the store")
    return FileResponse(path, media_type=str(image["content_type"]),
                        headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "private, max-age=86400"})


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def flash(
    request: Request, response: Response, message: str, kind: str = "ok", *, undo: tuple[float, float] | None = None,
) -> Response:
    """Show ``message`` on the next page this browser renders (a signed cookie, one minute).

    ``undo``: the (start, end) UNIX times of the decisions just taken, which the notice offers to undo
    for :attr:`~factloom.config.Settings.admin_undo_s`.
    """
    settings = request.app.state.resources.settings
    payload: dict[str, Any] = {"m": message[:300], "k": kind, "exp": time.time() + 60}
    if undo is not None:
        payload["u"] = [undo[0], undo[1], undo[1] + settings.admin_undo_s]
    response.set_cookie(FLASH_COOKIE, sign(settings.admin_key(), payload), max_age=60, path=PREFIX, httponly=True,
                        samesite="lax")
    return response


def _take_flash(request: Request) -> dict[str, Any] | None:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    payload = unsign(request.app.state.resources.settings.admin_key(), raw)
    if payload is None or not isinstance(payload.get("m"), str):
        return None
    out: dict[str, Any] = {"message": payload["m"], "kind": str(payload.get("k", "ok"))}
    window = payload.get("u")
    if isinstance(window, list) and len(window) == 3 and window[2] > time.time():
        out["undo"] = {"start": window[0], "end": window[1], "seconds": max(1, int(window[2] - time.time()))}
    return out


def _error(request: Request, status: int, title: str, detail: str) -> Response:
    if request.url.path.startswith(API_PREFIX):
        body = {"type": "about:blank", "title": title, "status": status, "detail": detail,
                "instance": request.url.path}
        return JSONResponse(body, status_code=status, media_type="application/problem+json")
    return render(request, "error.html", status=status, title=title, detail=detail, code=status)


class AdminRoute(APIRoute):
    """Admin routes answer failures as pages (or problem+json under ``/admin/api``), not as bare JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            start = time.perf_counter()
            response = await self._answer(handler, request)
            # every admin answer, pages, redirects, errors and static files alike: no URL of the queue
            # leaks to another site, and no browser sniffs a script out of an evidence image
            response.headers["Referrer-Policy"] = "same-origin"
            response.headers["X-Content-Type-Options"] = "nosniff"
            # the time the server spent on it (the browser's developer tools show it beside the network time)
            response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - start) * 1000:.1f}"
            return response

        return guarded

    @staticmethod
    async def _answer(handler: Callable[[Request], Coroutine[Any, Any, Response]], request: Request) -> Response:
        try:
            return await handler(request)
        except SignInRequired:
            if request.method == "GET" and not request.url.path.startswith(API_PREFIX):
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return redirect(f"{PREFIX}/login?next={quote(target, safe='')}")
            return _error(request, 401, "Sign-in required", "your session has ended; sign in again")
        except RoleRequired as exc:
            return _error(request, 403, "Not allowed", str(exc))
        except CsrfFailed:
            return _error(request, 403, "Form expired",
                          "this form was not sent from the current session; reload the page and try again")
        except PlatformError as exc:
            return _error(request, exc.status, exc.title, exc.detail)
        except RequestValidationError as exc:
            first = exc.errors()[0] if exc.errors() else {}
            where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query"))
            return _error(request, 400, "Bad request", f"{where}: {first.get('msg', 'invalid input')}")
        except InvalidGraphInput as exc:
            return _error(request, 400, "Bad request", str(exc))
        except GraphUnavailable as exc:
            log.warning("admin page without Neo4j: %s", exc)
            return _error(request, 503, "Graph unavailable", str(exc))
