"""The graph's shape: the labels and relationship types any statement may name, and the constraints
and indexes Neo4j holds (each ``IF NOT EXISTS``: applying them again is safe).
"""

from __future__ import annotations

__all__ = ["LABELS", "REL_TYPES", "EMBEDDING_DIMENSIONS", "SCHEMA"]

# the only labels and relationship types any statement may name
LABELS = frozenset({"Entity", "Alias"})
REL_TYPES = frozenset({"FACT", "ALIAS_OF"})

EMBEDDING_DIMENSIONS = 384

SCHEMA: tuple[str, ...] = (
    "CREATE CONSTRAINT entity_id IF NOT EXISTS FOR (e:Entity) REQUIRE e.id IS UNIQUE",
    "CREATE CONSTRAINT entity_kb_key IF NOT EXISTS FOR (e:Entity) REQUIRE (e.kb, e.key) IS UNIQUE",
    "CREATE CONSTRAINT fact_id IF NOT EXISTS FOR ()-[f:FACT]-() REQUIRE f.fact_id IS UNIQUE",
    "CREATE CONSTRAINT alias_kb_key IF NOT EXISTS FOR (a:Alias) REQUIRE (a.kb, a.key) IS UNIQUE",
    "CREATE INDEX entity_kb IF NOT EXISTS FOR (e:Entity) ON (e.kb)",
    "CREATE INDEX entity_needs_embedding IF NOT EXISTS FOR (e:Entity) ON (e.needs_embedding)",
    "CREATE INDEX fact_predicate IF NOT EXISTS FOR ()-[f:FACT]-() ON (f.predicate)",
    "CREATE INDEX fact_kb IF NOT EXISTS FOR ()-[f:FACT]-() ON (f.kb)",
    "CREATE FULLTEXT INDEX entity_names IF NOT EXISTS FOR (e:Entity) ON EACH [e.name, e.aliases]",
    "CREATE VECTOR INDEX entity_embedding IF NOT EXISTS FOR (e:Entity) ON e.embedding "
    "OPTIONS {indexConfig: {`vector.dimensions`: " + str(EMBEDDING_DIMENSIONS) + ", "
    "`vector.similarity_function`: 'cosine'}}",
)
