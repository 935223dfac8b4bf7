"""Domain errors of the platform, mapped once, at the HTTP edge, to ``application/problem+json``.

::

    PlatformError                 500
     ├── BadRequest               400
     ├── Unauthorized             401
     ├── Forbidden                403
     ├── NotFound                 404
     ├── TooLarge                 413
     ├── Conflict                 409
     ├── TooManyRequests          429
     └── Unavailable              503

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

    def __init_subclass__(cls, *, status: int, title: str, headers: dict[str, str] | None = None,
                          **kwargs: Any) -> None:
        """Each subclass names its HTTP status and problem title in its class line."""
        super().__init_subclass__(**kwargs)
        cls.status, cls.title = status, title
        if headers is not None:
            cls.headers = headers


class BadRequest(PlatformError, status=400, title="Bad request"):
    """Input that passed parsing but not the rules."""


class Unauthorized(PlatformError, status=401, title="Unauthorized", headers={"WWW-Authenticate": "Bearer"}):
    """No key, or an unknown, expired or revoked one."""


class Forbidden(PlatformError, status=403, title="Forbidden"):
    """A key without the scope or the kb the route needs."""


class NotFound(PlatformError, status=404, title="Not found"):
    """No such row: see :func:`found`."""


class TooLarge(PlatformError, status=413, title="Payload too large"):
    """A batch or a body over its size limit."""


class Conflict(PlatformError, status=409, title="Conflict"):
    """A change to something that is no longer in the state the caller saw."""


class TooManyRequests(PlatformError, status=429, title="Too many requests"):
    """A rate limit or a bounded queue is full; ``retry_after`` says when to try again."""

    def __init__(self, detail: str, *, retry_after: float, **extra: Any) -> None:
        super().__init__(detail, retry_after=retry_after, **extra)


class Unavailable(PlatformError, status=503, title="Service unavailable"):
    """A store (Neo4j, Redis, SQL) cannot be reached; ``retry_after`` says when to try again."""

    def __init__(self, detail: str, *, retry_after: float = RETRY_AFTER_S, **extra: Any) -> None:
        super().__init__(detail, retry_after=retry_after, **extra)


T = TypeVar("T")


def found(row: T | None, what: str) -> T:
    """The row (entity, value) the caller looked up, or :class:`NotFound` ("no " + ``what``) where
    it found none."""
    if row is None:
        raise NotFound(f"no {what}")
    return row
