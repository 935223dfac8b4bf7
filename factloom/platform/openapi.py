"""The served OpenAPI document, with every error the ``/v1`` operations can answer.

FastAPI documents a 422 as ``application/json`` (its ``HTTPValidationError``) and no other error;
the platform answers every error as ``application/problem+json`` (RFC 9457, ``app.problem``). This
module rewrites the generated document once, in one place, so that each ``/v1`` operation names its
security (an API key as a bearer token) and lists the problems it can give:

======  =========================================================================
401     every ``/v1`` operation (no key, or an unknown, revoked or malformed one)
403     every ``/v1`` operation (a key without the scope, or the kb, it needs)
400     operations with a body (malformed JSON) and :data:`EXTRA` (rules past parsing)
413     operations with a body (over ``MAX_BODY_BYTES``, or a batch over its limit)
422     operations with a body or parameters (the schema refused them)
404     operations with a path parameter (it names a thing) and :data:`EXTRA`
409     :data:`EXTRA`: a state the request does not fit
429     every ``/v1`` operation (a rate limit or a full queue), with ``Retry-After``
503     every ``/v1`` operation (Neo4j, Redis or SQL down), with ``Retry-After``
======  =========================================================================
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

__all__ = ["PROBLEM", "PROBLEM_SCHEMA", "EXTRA", "document_problems", "allowed_methods"]

PROBLEM = "application/problem+json"

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": "An error, as RFC 9457 problem details; some carry more members (errors, needed, limit…).",
    "type": "object",
    "required": ["type", "title", "status", "detail", "instance"],
    "properties": {
        "type": {"type": "string", "description": "always about:blank: the status says what kind"},
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string", "description": "what was wrong, for a person"},
        "instance": {"type": "string", "description": "the request's path"},
        "errors": {
            "type": "array", "description": "each input the schema refused (400, 422)",
            "items": {"type": "object", "properties": {
                "loc": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
                "msg": {"type": "string"}, "type": {"type": "string"},
            }},
        },
    },
    "additionalProperties": True,
}

BEARER = {"type": "http", "scheme": "bearer", "description": "an API key, fl_<prefix>_<secret> (factloom keys create)"}

_WHY = {
    400: "Bad request: malformed JSON, or input the schema cannot express",
    401: "No API key, or an unknown, revoked or malformed one",
    403: "The key lacks the scope or the kb this operation needs",
    404: "Not found: what the path (or the kb) names does not exist",
    409: "Conflict: the request does not fit the current state",
    413: "The body is over the size limit, or the batch over its count",
    422: "The body or the parameters do not match the schema",
    429: "Too many requests: a rate limit or a full queue; try again after Retry-After seconds",
    503: "A store (Neo4j, Redis or SQL) cannot be reached; try again after Retry-After seconds",
}
_RETRY_AFTER = {"description": "seconds to wait before trying again", "schema": {"type": "integer", "minimum": 1}}
_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "the scheme: Bearer", "schema": {"type": "string"}}},
    429: {"Retry-After": _RETRY_AFTER},
    503: {"Retry-After": _RETRY_AFTER},
}

# what the rules above cannot see: statuses a service gives for a body that parsed, by operation
EXTRA: dict[tuple[str, str], frozenset[int]] = {
    ("post", "/v1/query"): frozenset({400, 404, 409}),  # bad graph input; kb unknown; no learned reasoner
    ("post", "/v1/feedback"): frozenset({400, 404}),  # bad graph input; kb unknown
    ("post", "/v1/review/{submission_id}"): frozenset({409}),  # not waiting for review
    ("post", "/v1/models/{version}/activate"): frozenset({409}),  # cannot serve (no kb, artefact gone)
    ("post", "/v1/models/{version}/promote"): frozenset({409}),
    ("post", "/v1/models/{version}/shadow"): frozenset({409}),  # active already, or cannot serve
    ("post", "/v1/models/{version}/ab"): frozenset({409}),
    ("post", "/v1/models/{version}/stop"): frozenset({409}),  # not on trial
    ("post", "/v1/models/rollback"): frozenset({409}),  # nothing active, or nothing good to go back to
    ("post", "/v1/models/learn"): frozenset({409}),  # nothing new to learn
    ("post", "/v1/keys/{key_id}/rotate"): frozenset({409}),  # revoked or expired
}


def _statuses(method: str, path: str, operation: dict[str, Any]) -> set[int]:
    statuses = {401, 403, 429, 503} | EXTRA.get((method, path), frozenset())
    parameters = operation.get("parameters", [])
    if "requestBody" in operation:
        statuses |= {400, 413, 422}
    if parameters:
        statuses.add(422)
    if any(p.get("in") == "path" for p in parameters):
        statuses.add(404)
    return statuses


def _problem_response(status: int) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": _WHY[status],
        "content": {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }
    if status in _HEADERS:
        response["headers"] = _HEADERS[status]
    return response


def with_problems(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with the ``Problem`` component and each ``/v1`` operation's problem responses."""
    for path, item in document.get("paths", {}).items():
        if not path.startswith("/v1/"):
            continue
        for method, operation in item.items():
            operation["security"] = [{"bearer": []}]
            responses = operation.setdefault("responses", {})
            for status in sorted(_statuses(method, path, operation)):
                responses[str(status)] = _problem_response(status)
    components = document.setdefault("components", {})
    components.setdefault("securitySchemes", {})["bearer"] = BEARER
    schemas = components.setdefault("schemas", {})
    schemas["Problem"] = PROBLEM_SCHEMA
    if "/HTTPValidationError'" not in str(document.get("paths")):  # FastAPI's 422, replaced above
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
    return document


def document_problems(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """The ``app.openapi`` that builds the document once, with :func:`with_problems`."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = with_problems(get_openapi(
                title=app.title, version=app.version, openapi_version=app.openapi_version,
                description=app.description, routes=app.routes, tags=app.openapi_tags, servers=app.servers,
            ))
        return app.openapi_schema

    return openapi


def allowed_methods(document: dict[str, Any], path: str, router_allow: str = "") -> list[str]:
    """What ``Allow`` says on a 405 for ``path``: the methods of every documented operation whose
    template matches it, and those the router named. The router names only the methods of the first
    route that matched the path, where GET and POST of one path are two routes."""
    methods = {m.strip().upper() for m in router_allow.split(",") if m.strip()}
    for template, item in document.get("paths", {}).items():
        if re.fullmatch(re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template)), path):
            methods |= {m.upper() for m in item if m in _METHODS}
    if "GET" in methods:
        methods.add("HEAD")  # Starlette answers HEAD wherever it answers GET
    return sorted(methods)


_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})
