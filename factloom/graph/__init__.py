"""Neo4j: the living knowledge graph. Receives plain values; never reads settings.

The names below load on first use (PEP 562), so the plain-value modules (``graph.types``,
``graph.mentions``) import without the Neo4j driver: the model layer uses them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from factloom.graph.errors import GraphError, GraphUnavailable, InvalidGraphInput
    from factloom.graph.store import Neo4jStore
    from factloom.graph.types import FactWrite, StoredFact, entity_key, fact_id_for

__all__ = [
    "FactWrite", "GraphError", "GraphUnavailable", "InvalidGraphInput", "Neo4jStore", "StoredFact",
    "entity_key", "fact_id_for",
]

_HOME = {
    "GraphError": "errors", "GraphUnavailable": "errors", "InvalidGraphInput": "errors", "Neo4jStore": "store",
    "FactWrite": "types", "StoredFact": "types", "entity_key": "types", "fact_id_for": "types",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'factloom.graph' has no attribute {name!r}")
    return getattr(import_module(f"factloom.graph.{_HOME[name]}"), name)
