"""The admin UI's graph explorer: entity search for people, one entity, and its facts with their
provenance and validity (now, as of a date, or its whole history).
"""

from __future__ import annotations

from factloom.graph.queries.validity import status, valid_at

__all__ = ["SEARCH_ENTITIES", "ENTITY", "ENTITY_FACTS"]

# entity search for people: names and aliases through the full-text index (``$text`` escaped, a
# trailing wildcard already added); ``degree`` tells a hub from a leaf in the result list
SEARCH_ENTITIES = """
CALL db.index.fulltext.queryNodes('entity_names', $text, {limit: $fetch}) YIELD node, score
WHERE node.kb = $kb
RETURN node.id AS id, node.name AS name, coalesce(node.aliases, []) AS aliases, score,
       COUNT { (node)-[:FACT]-() } AS degree
ORDER BY score DESC, name
LIMIT $limit
"""

ENTITY = """
MATCH (e:Entity {kb: $kb, id: $id})
RETURN e.id AS id, e.name AS name, coalesce(e.aliases, []) AS aliases, e.created_at AS created_at,
       COUNT { (e)-[:FACT]-() } AS degree
"""

# the facts of one entity in both directions with their provenance and validity; with ``$history``
# false only those valid at ``$as_of`` (null: now), with it true every fact ever recorded
ENTITY_FACTS = """
WITH coalesce($as_of, datetime()) AS at
MATCH (n:Entity {kb: $kb, id: $id})-[r:FACT]-(m:Entity)
WHERE r.kb = $kb
  AND ($history OR (""" + valid_at("r") + """))
WITH n, r, m, at
ORDER BY r.predicate, m.name
LIMIT $limit
RETURN r.fact_id AS fact_id, r.predicate AS predicate, coalesce(r.sources, []) AS sources,
       r.confidence AS confidence, r.valid_from AS valid_from, r.valid_to AS valid_to,
       r.recorded_at AS recorded_at, r.superseded_by AS superseded_by, """ + status("r") + """ AS status,
       startNode(r) = n AS outgoing, m.id AS other_id, m.name AS other_name,
       """ + valid_at("r") + """ AS valid_at
"""
