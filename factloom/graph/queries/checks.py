"""Reads of the check stage and of training: entity types, how often each type sits on each side of
each predicate, and the kb's accepted current facts page by page.
"""

from __future__ import annotations

from factloom.graph.queries.validity import current

__all__ = ["ENTITY_TYPES", "TYPE_DOMAIN_COUNTS", "TYPE_RANGE_COUNTS", "ACCEPTED_TRIPLES"]

# the types of these entities (keys): objects of their current type facts (``$type_predicates``)
ENTITY_TYPES = """
UNWIND $keys AS key
MATCH (e:Entity {kb: $kb, key: key})-[t:FACT]->(ty:Entity)
WHERE t.kb = $kb AND t.predicate IN $type_predicates
  AND """ + current("t") + """
RETURN key, collect(DISTINCT ty.key) AS types
"""


def _type_counts(facts: str) -> str:
    """How often each type occurs at one end of each predicate, over the kb's current facts; ``facts``
    is the pattern of the counted facts, with ``(e)`` at the typed end. Starts from the type facts
    (predicate index), so a kb without any costs one index lookup."""
    return """
MATCH (e:Entity)-[t:FACT]->(ty:Entity)
WHERE t.predicate IN $type_predicates AND t.kb = $kb
  AND """ + current("t") + """
WITH e, collect(DISTINCT ty.key) AS types
MATCH """ + facts + """
WHERE r.kb = $kb AND NOT r.predicate IN $type_predicates
  AND """ + current("r") + """
UNWIND types AS type
RETURN r.predicate AS predicate, type, count(*) AS n
"""


# the types on the subject side of each predicate, and on the object side
TYPE_DOMAIN_COUNTS = _type_counts("(e)-[r:FACT]->(:Entity)")
TYPE_RANGE_COUNTS = _type_counts("(:Entity)-[r:FACT]->(e)")

# one page of the kb's accepted, current facts as name triples (scorer training), keyset by fact_id
ACCEPTED_TRIPLES = """
MATCH (s:Entity)-[r:FACT]->(o:Entity)
WHERE r.kb = $kb AND r.fact_id > $after
  AND """ + current("r") + """
RETURN r.fact_id AS fact_id, s.name AS subject, r.predicate AS predicate, o.name AS object
ORDER BY r.fact_id
LIMIT $limit
"""
