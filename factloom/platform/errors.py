"""Domain errors of the platform, mapped once, at the HTTP edge, to ``application/problem+json``.

::

    PlatformError                 500
     ├── BadRequest               400  input that passed parsing but not the rules (oversize, bad kb)
     ├── Unauthorized             401  no key, or an unknown or revoked one
     ├── Forbidden                403  a key without the scope the route needs
     ├── NotFound                 404
     ├── TooLarge                 413  a batch over the size limit
     ├── Conflict                 409  a decision on a submission that is not waiting for one
     └── Unavailable              503  Neo4j, Redis or SQL cannot be reached
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "PlatformError", "BadRequest", "Unauthorized", "Forbidden", "NotFound", "TooLarge", "Conflict", "Unavailable",
]


class PlatformError(Exception):
    status: ClassVar[int] = 500
    title: ClassVar[str] = "Internal error"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class BadRequest(PlatformError):
    status = 400
    title = "Bad request"


class Unauthorized(PlatformError):
    status = 401
    title = "Unauthorized"


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


class Unavailable(PlatformError):
    status = 503
    title = "Service unavailable"
