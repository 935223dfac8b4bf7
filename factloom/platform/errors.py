"""Domain errors of the platform, mapped once, at the HTTP edge, to ``application/problem+json``.

::

    PlatformError                 500
     ├── BadRequest               400  input that passed parsing but not the rules (oversize, bad kb)
     ├── Unauthorized             401  no key, or an unknown or revoked one
     ├── Forbidden                403  a key without the scope the route needs
     ├── NotFound                 404
     ├── TooLarge                 413  a batch over the size limit
     ├── Conflict                 409  a decision on a submission that is not waiting for one
     ├── TooManyRequests          429  a rate limit or a bounded queue is full; try again later
     └── Unavailable              503  Neo4j, Redis or SQL cannot be reached

A 429 or 503 tells the client when to try again: ``retry_after`` seconds, sent as ``Retry-After``.
A 401 names the scheme it wants (``WWW-Authenticate: Bearer``, RFC 9110 §11.6.1).
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

__all__ = [
    "PlatformError", "BadRequest", "Unauthorized", "Forbidden", "NotFound", "TooLarge", "Conflict", "TooManyRequests",
    "Unavailable", "RETRY_AFTER_S", "found",
]

# what a 503 asks a client to wait when nothing better is known (a store restarting takes seconds)
RETRY_AFTER_S = 5


class PlatformError(Exception):
    status: ClassVar[int] = 500
    title: ClassVar[str] = "Internal error"
    headers: ClassVar[dict[str, str]] = {}  # sent with the problem, beside Retry-After

    def __init__(self, detail: str, *, retry_after: float | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after
        self.extra = extra


class BadRequest(PlatformError):
    status = 400
    title = "Bad request"


class Unauthorized(PlatformError):
    status = 401
    title = "Unauthorized"
    headers = {"WWW-Authenticate": "Bearer"}


class Forbidden(PlatformError):
    status = 403
    title = "Forbidden"


class NotFound(PlatformError):
    status = 404
    title = "Not found"


class TooLarge(PlatformError):
    status = 413
    title = "Payload too large"


class Conflict(PlatformError):
    status = 409
    title = "Conflict"


class TooManyRequests(PlatformError):
    status = 429
    title = "Too many requests"

    def __init__(self, detail: str, *, retry_after: float, **extra: Any) -> None:
        super().__init__(detail, retry_after=retry_after, **extra)


class Unavailable(PlatformError):
    status = 503
    title = "Service unavailable"

    def __init__(self, detail: str, *, retry_after: float = RETRY_AFTER_S, **extra: Any) -> None:
        super().__init__(detail, retry_after=retry_after, **extra)


T = TypeVar("T")


def found(row: T | None, what: str) -> T:
    """The row (entity, value) the caller looked up, or :class:`NotFound` ("no " + ``what``) where
    it found none."""
    if row is None:
        raise NotFound(f"no {what}")
    return row
