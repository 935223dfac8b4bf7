"""Every Cypher statement FactLoom runs, in one place. Values only ever arrive as parameters.

Entities are ``(:Entity {kb, id, key, name, aliases, embedding})``, each alias also an indexed
``(:Alias {kb, key})-[:ALIAS_OF]->(:Entity)``; facts are
``[:FACT {fact_id, kb, predicate, confidence, sources, valid_from, valid_to, recorded_at, status}]``
relationships between them. A fact is current when ``valid_to`` is null or in the future; nothing is
deleted (superseded facts keep their ``valid_to`` and stay queryable "as of" a date).

The statements live by concern, and callers read them from here (``from factloom.graph import
queries as q``; ``q.WRITE_FACTS``):

* :mod:`~factloom.graph.queries.schema` — labels, relationship types, constraints and indexes;
* :mod:`~factloom.graph.queries.validity` — when a fact holds: the fragments every other module
  splices in, each written once;
* :mod:`~factloom.graph.queries.writes` — the ingest and commit path;
* :mod:`~factloom.graph.queries.query_path` — linking and hop-by-hop retrieval;
* :mod:`~factloom.graph.queries.explorer` — the admin UI's graph explorer;
* :mod:`~factloom.graph.queries.checks` — the check stage's and training's reads;
* :mod:`~factloom.graph.queries.backup` — backup and restore.
"""

from __future__ import annotations

from factloom.graph.queries.backup import (
    COUNT_ALL,
    DUMP_NODES,
    DUMP_RELATIONSHIPS,
    RESTORE_NODES,
    RESTORE_RELATIONSHIPS,
    WIPE_ALL,
)
from factloom.graph.queries.checks import ACCEPTED_TRIPLES, ENTITY_TYPES, TYPE_DOMAIN_COUNTS, TYPE_RANGE_COUNTS
from factloom.graph.queries.explorer import ENTITY, ENTITY_FACTS, SEARCH_ENTITIES
from factloom.graph.queries.query_path import (
    EXPAND_HOP,
    FRONTIER_RELATIONS,
    GUIDED_HOP,
    KB_PREDICATES,
    LINK_EXACT,
    LINK_FULLTEXT,
    LINK_VECTOR,
    RELATION_PAGES,
    SOME_FACT,
)
from factloom.graph.queries.schema import EMBEDDING_DIMENSIONS, LABELS, REL_TYPES, SCHEMA
from factloom.graph.queries.writes import (
    ADD_ALIASES,
    COUNT_KB,
    CREATE_ENTITIES,
    CURRENT_FACTS,
    DROP_KB,
    ENTITIES_TO_EMBED,
    FACTS_BY_ID,
    KB_HAS_ENTITY,
    RESOLVE_IDS,
    RESOLVE_KEYS,
    RETRACT_FACT,
    SET_EMBEDDINGS,
    SET_FACT_SOURCES,
    SUPERSEDE,
    WRITE_FACTS,
)

__all__ = [
    # schema
    "LABELS", "REL_TYPES", "EMBEDDING_DIMENSIONS", "SCHEMA",
    # writes (ingest and commit)
    "RESOLVE_KEYS", "RESOLVE_IDS", "CREATE_ENTITIES", "ENTITIES_TO_EMBED", "SET_EMBEDDINGS", "ADD_ALIASES",
    "SUPERSEDE", "RETRACT_FACT", "SET_FACT_SOURCES", "WRITE_FACTS", "CURRENT_FACTS", "FACTS_BY_ID", "COUNT_KB",
    "KB_HAS_ENTITY", "DROP_KB",
    # query path
    "LINK_EXACT", "LINK_FULLTEXT", "LINK_VECTOR", "EXPAND_HOP", "RELATION_PAGES", "FRONTIER_RELATIONS",
    "GUIDED_HOP", "SOME_FACT", "KB_PREDICATES",
    # graph explorer
    "SEARCH_ENTITIES", "ENTITY", "ENTITY_FACTS",
    # check stage and training
    "ENTITY_TYPES", "TYPE_DOMAIN_COUNTS", "TYPE_RANGE_COUNTS", "ACCEPTED_TRIPLES",
    # backup and restore
    "DUMP_NODES", "DUMP_RELATIONSHIPS", "RESTORE_NODES", "RESTORE_RELATIONSHIPS", "COUNT_ALL", "WIPE_ALL",
]
