"""Errors of the graph layer.

::

    GraphError
     ├── GraphUnavailable      Neo4j cannot be reached (ServiceUnavailable, auth failure)
     └── InvalidGraphInput     a value the graph refuses: unknown label, bad kb name, oversize input
"""

from __future__ import annotations

__all__ = ["GraphError", "GraphUnavailable", "InvalidGraphInput"]


class GraphError(Exception):
    """Base of every error raised by ``factloom.graph``."""


class GraphUnavailable(GraphError):
    """Neo4j is down or refuses the credentials."""


class InvalidGraphInput(GraphError):
    """A value that cannot go into the graph."""
