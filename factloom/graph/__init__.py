"""Neo4j: the living knowledge graph. Receives plain values; never reads settings."""

from __future__ import annotations

from factloom.graph.errors import GraphError, GraphUnavailable, InvalidGraphInput
from factloom.graph.store import Neo4jStore
from factloom.graph.types import FactWrite, StoredFact, entity_key, fact_id_for

__all__ = [
    "FactWrite", "GraphError", "GraphUnavailable", "InvalidGraphInput", "Neo4jStore", "StoredFact",
    "entity_key", "fact_id_for",
]
