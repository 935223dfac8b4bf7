"""When a fact holds, written once: the conditions every statement splices in.

Each fragment names its relationship variable; the queries splice them in with ``+`` (Cypher's own
braces rule out str.format).
"""

from __future__ import annotations

__all__ = ["status", "not_ended", "current", "valid_at", "servable"]


def status(r: str) -> str:
    """The fact's status: ``'accepted'`` where none is stored."""
    return f"coalesce({r}.status, 'accepted')"


def not_ended(r: str) -> str:
    """The fact has no end, or ends after now: what a new value supersedes or contradicts."""
    return f"({r}.valid_to IS NULL OR {r}.valid_to > datetime())"


def current(r: str) -> str:
    """An accepted fact that has not ended: what the graph asserts now (checks, training)."""
    return f"{status(r)} = 'accepted' AND {not_ended(r)}"


def valid_at(r: str, at: str = "at") -> str:
    """The fact's validity interval contains the instant ``at``."""
    return f"({r}.valid_to IS NULL OR {r}.valid_to > {at}) AND ({r}.valid_from IS NULL OR {r}.valid_from <= {at})"


def servable(r: str) -> str:
    """A fact the query path may use: its status among ``$statuses``, valid at ``at`` ($as_of or now)."""
    return f"{status(r)} IN $statuses AND {valid_at(r)}"
