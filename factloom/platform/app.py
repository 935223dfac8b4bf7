"""The FastAPI app: wiring only. ``uvicorn factloom.platform.app:app``."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as SqlTimeout
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from factloom import __version__
from factloom.config import Settings, get_settings
from factloom.graph.errors import GraphUnavailable, InvalidGraphInput
from factloom.platform.admin.routes import router as admin_router
from factloom.platform.alerts.routes import router as alerts_router
from factloom.platform.audit.routes import router as audit_router
from factloom.platform.errors import RETRY_AFTER_S, PlatformError, Unauthorized
from factloom.platform.feedback.routes import router as feedback_router
from factloom.platform.ingest.routes import router as ingest_router
from factloom.platform.metrics import REGISTRY, REQUEST_SECONDS, LedgerCollector, scrape_registry
from factloom.platform.models.routes import router as models_router
from factloom.platform.openapi import PROBLEM, allowed_methods, document_problems
from factloom.platform.query.routes import router as query_router
from factloom.platform.query.service import warm_up
from factloom.platform.resources import Resources
from factloom.platform.review.routes import router as review_router
from factloom.platform.system import router as system_router
from factloom.runtime import settle_heap

__all__ = ["app", "create_app"]

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 16 * 1024 * 1024
TOO_LARGE = f"request bodies are limited to {MAX_BODY_BYTES} bytes"
NO_KEY = "missing API key; send 'Authorization: Bearer KEY'"


def problem(status: int, title: str, detail: str, request: Request, *, retry_after: float | None = None,
            headers: Mapping[str, str] | None = None, **extra: Any) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail,
            "instance": request.url.path, **extra}
    headers = dict(headers or {})
    if retry_after is not None:
        # whole seconds, rounded up: "Retry-After: 0" would invite the retry storm it is there to stop
        headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def _bearer(headers: Headers) -> bool:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and bool(token.strip())


class MeasureRequests:
    """Guards the body and the key before any route reads them, and times each request by route.

    * A body over :data:`MAX_BODY_BYTES` is refused with 413: at once when ``Content-Length`` says
      so, else as soon as the stream (chunked, no length) passes the limit — ``receive`` raises,
      so neither the rest of the body nor the JSON parser is ever reached.
    * A ``/v1`` request without ``Authorization: Bearer …`` is refused with 401 before its body is
      read; the route's dependency (``deps.require_scope``) still checks the key and its scope.

    Plain ASGI rather than ``@app.middleware("http")``: Starlette's ``BaseHTTPMiddleware`` runs the
    app in a task group and streams its response through a queue (1-hop at 8 clients: 122.5 → 139.9
    questions/s without it, docs/reasoning.md).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        received = 0

        async def receive_within_limit() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > MAX_BODY_BYTES:
                    # FastAPI re-raises an HTTPException met while reading the body (any other error
                    # becomes its 400); the app's handler answers it as a problem
                    raise StarletteHTTPException(413, TOO_LARGE)
            return message

        headers = Headers(scope=scope)
        length = headers.get("content-length")
        try:
            if length and length.isdigit() and int(length) > MAX_BODY_BYTES:
                await problem(413, "Payload too large", TOO_LARGE, Request(scope))(scope, receive, send_status)
            elif scope["path"].startswith("/v1/") and not _bearer(headers):
                await problem(401, "Unauthorized", NO_KEY, Request(scope),
                              headers=Unauthorized.headers)(scope, receive, send_status)
            else:
                await self.app(scope, receive_within_limit, send_status)
        finally:
            # the router records the matched route in the scope it was given, which is this one
            route = getattr(scope.get("route"), "path", "unmatched")
            REQUEST_SECONDS.labels(scope["method"], route, status).observe(time.perf_counter() - start)


def _log_info_to_stderr() -> None:
    """FactLoom's INFO lines (models loaded, warm-up times) beside uvicorn's in the API's log,
    unless logging is configured already (a host application's, pytest's)."""
    logger = logging.getLogger("factloom")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        _log_info_to_stderr()
        if settings.query_torch_threads:
            import torch

            # the API's models run on one batcher thread beside the request threads and a local
            # Neo4j; two intra-op threads spin on a core the others need (2 cores, 8 clients:
            # 48 → 56 questions/s with one)
            torch.set_num_threads(settings.query_torch_threads)
        resources = Resources.open(settings)
        app.state.resources = resources
        collector = LedgerCollector(resources.db, settings.redis_url, ("ingest", "check", "learn"))
        REGISTRY.register(collector)
        app.state.ledger_metrics = collector
        settle_heap()  # the imported libraries; the warm-up settles the models it loads
        if settings.query_warm_up:
            threading.Thread(target=warm_up, args=(resources,), name="query-warm-up", daemon=True).start()
        try:
            yield
        finally:
            REGISTRY.unregister(collector)
            resources.close()

    app = FastAPI(
        title="FactLoom", version=__version__, lifespan=lifespan,
        description="Verified facts in a living knowledge graph; multi-hop answers with their paths.",
    )

    app.add_middleware(MeasureRequests)
    app.openapi = document_problems(app)  # type: ignore[method-assign]

    @app.exception_handler(PlatformError)
    async def platform_error(request: Request, exc: PlatformError) -> JSONResponse:
        return problem(exc.status, exc.title, exc.detail, request, retry_after=exc.retry_after, headers=exc.headers,
                       **exc.extra)

    @app.exception_handler(GraphUnavailable)
    async def graph_down(request: Request, exc: GraphUnavailable) -> JSONResponse:
        return problem(503, "Service unavailable", str(exc), request, retry_after=RETRY_AFTER_S)

    @app.exception_handler(OperationalError)
    @app.exception_handler(SqlTimeout)
    async def ledger_down(request: Request, exc: Exception) -> JSONResponse:
        # the SQL ledger cannot be reached (restarting, out of connections): nothing was written
        log.warning("the ledger is unavailable: %s", str(exc).splitlines()[0])
        return problem(503, "Service unavailable", "the ledger (SQL) is unavailable; try again shortly", request,
                       retry_after=RETRY_AFTER_S)

    @app.exception_handler(InvalidGraphInput)
    async def graph_input(request: Request, exc: InvalidGraphInput) -> JSONResponse:
        return problem(400, "Bad request", str(exc), request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        if any(e["type"] == "json_invalid" for e in errors):
            return problem(400, "Malformed JSON", "the request body is not valid JSON", request, errors=errors)
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"])
        return problem(422, "Invalid request", f"{where}: {first['msg']}", request, errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        try:
            title = HTTPStatus(exc.status_code).phrase
        except ValueError:
            title = str(exc.detail)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Allow names every method of the path (RFC 9110 §15.5.6); the router's names only those of
            # the first route that matched it, where GET and POST of one path are two routes
            headers["Allow"] = ", ".join(allowed_methods(app.openapi(), request.url.path, headers.get("Allow", "")))
        return problem(exc.status_code, title, str(exc.detail), request, headers=headers)

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        registry = scrape_registry(request.app.state.ledger_metrics)
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.include_router(system_router)
    app.include_router(ingest_router)
    app.include_router(review_router)
    app.include_router(query_router)
    app.include_router(feedback_router)
    app.include_router(models_router)
    app.include_router(audit_router)
    app.include_router(alerts_router)
    app.include_router(admin_router)
    return app


app = create_app()
