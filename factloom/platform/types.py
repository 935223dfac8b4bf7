"""The value types every request and response body shares: instants and names.

Each rule lives here once, and the JSON Schema each type publishes says exactly what it accepts,
so that a client generating requests from ``/openapi.json`` is refused only for what the schema
forbids (schemathesis checks both ways, ``tests/platform/test_api_conformance.py``).

* :data:`Instant` — a moment a client sends: an RFC 3339 string (``2024-01-01T00:00:00Z``,
  ``2024-01-01T02:00:00+02:00``) with its time zone, read as UTC. A number (``0``) or a date
  without a zone is refused, not guessed. The first and last calendar days, 0001-01-01 and
  9999-12-31, are refused as written: any other written date stays within years 1–9999 in UTC
  whatever its offset (offsets are under 24 h), where Python's and Neo4j's datetimes end
  (``9999-12-31T23:59:59-14:00`` is year 10000 in UTC; the driver raised "Ticks out of range").
* :data:`Timestamp` — a moment the platform serves: always with its zone. SQLite keeps no zone, so
  a naive value read from the ledger is the UTC it was written as.
* :data:`Name` — a subject, object, source or question: 1 to 1000 characters with at least one
  that is not a space, and no C0 control character but tab and newline (a NUL breaks PostgreSQL
  and hides text in logs and the admin UI). :class:`Printable` is that rule for other lengths, or
  for one line. Surrounding whitespace is removed; what is left is stored as sent, byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, GetCoreSchemaHandler, GetJsonSchemaHandler, WithJsonSchema
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

__all__ = ["Instant", "Timestamp", "Name", "Printable", "NO_NUL", "INSTANT_RULE"]

NO_NUL = r"^[^\x00]*$"
# a character str.strip() keeps: neither C0 control nor what str.isspace() calls whitespace, spelled
# out, since JSON Schema's (ECMA) \s is not Python's (U+FEFF)
_VISIBLE = r"[^\x00-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"

# RFC 3339's date-time, seconds and zone required (ISO 8601 alone would let '2024' or a week date in)
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", re.ASCII)
_ENDS = ("0001-01-01", "9999-12-31")
INSTANT_RULE = ("an RFC 3339 date-time with its time zone, e.g. 2024-01-01T00:00:00Z or 2024-01-01T02:00:00+02:00; "
                "read as UTC; written dates 0001-01-02 to 9999-12-30")


def _rfc3339(value: Any) -> Any:
    if isinstance(value, datetime):  # a Python caller's (admin UI, tests); the zone is checked after
        return value
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ValueError(f"expected {INSTANT_RULE}")
    if value.startswith(_ENDS):
        raise ValueError(f"out of range: {INSTANT_RULE}")
    return value


def _as_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("needs a time zone, e.g. 2024-01-01T00:00:00Z")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # a Python caller's datetime at the very ends
        raise ValueError(f"out of range: {INSTANT_RULE}") from None


def _served_in_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


Instant = Annotated[
    datetime,
    BeforeValidator(_rfc3339),
    AfterValidator(_as_utc),
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": r"^(?!0001-01-01|9999-12-31)",
                    "description": INSTANT_RULE}),
]
Timestamp = Annotated[datetime, AfterValidator(_served_in_utc)]


@dataclass(frozen=True)
class Printable:
    """``Annotated[str, Printable(200, one_line=True)]``: 1 to ``max_length`` characters, one of them
    visible; no C0 control character but tab and newline (none at all with ``one_line``); surrounding
    whitespace removed. Its JSON Schema states the same rule as a pattern; the errors name the
    character at fault rather than quote the pattern."""

    max_length: int
    one_line: bool = False

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(
            self._check, core_schema.str_schema(min_length=1, max_length=self.max_length))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        json_schema = handler(schema)
        allowed = r"[^\x00-\x1f]" if self.one_line else r"[^\x00-\x08\x0b-\x1f]"
        json_schema["pattern"] = f"^{allowed}*{_VISIBLE}{allowed}*$"
        return json_schema

    def _check(self, value: str) -> str:
        allowed = "" if self.one_line else "\t\n"
        bad = next((c for c in value if c < " " and c not in allowed), None)
        if bad is not None:
            name = " (NUL)" if bad == "\x00" else ""
            raise ValueError(f"must not contain the control character U+{ord(bad):04X}{name}; "
                             + ("a predicate is one line" if self.one_line else "only tab and newline are allowed"))
        stripped = value.strip()
        if not stripped:
            raise ValueError("must have at least 1 character other than spaces")
        return stripped


Name = Annotated[str, Printable(1000)]
