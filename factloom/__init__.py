"""FactLoom: verified facts in a living Neo4j knowledge graph, multi-hop answers with their paths."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
