"""The ingest and commit path: names resolved to entities, entities and aliases created, facts written,
superseded, retracted; and the reads that path needs (the current facts of a key, facts by id, a kb's
size), and dropping a whole kb.
"""

from __future__ import annotations

from factloom.graph.queries.validity import not_ended

__all__ = [
    "RESOLVE_KEYS", "RESOLVE_IDS", "CREATE_ENTITIES", "ENTITIES_TO_EMBED", "SET_EMBEDDINGS", "ADD_ALIASES",
    "SUPERSEDE", "RETRACT_FACT", "SET_FACT_SOURCES", "WRITE_FACTS", "CURRENT_FACTS", "FACTS_BY_ID", "COUNT_KB",
    "KB_HAS_ENTITY", "DROP_KB",
]

# which of these keys (names or aliases) already resolve to an entity of the kb
RESOLVE_KEYS = """
UNWIND $keys AS key
OPTIONAL MATCH (e:Entity {kb: $kb, key: key})
OPTIONAL MATCH (:Alias {kb: $kb, key: key})-[:ALIAS_OF]->(a:Entity)
RETURN key, coalesce(e.id, a.id) AS id
"""

# which of these strings are ids of entities of the kb (subjects and objects may be given by id)
RESOLVE_IDS = """
UNWIND $ids AS id
MATCH (e:Entity {kb: $kb, id: id})
RETURN e.id AS id
"""

CREATE_ENTITIES = """
UNWIND $entities AS row
MERGE (e:Entity {kb: $kb, key: row.key})
  ON CREATE SET e.id = row.id, e.name = row.name, e.aliases = [],
                e.embedding = row.embedding, e.created_at = datetime(),
                e.needs_embedding = CASE WHEN row.embedding IS NULL THEN true ELSE null END
RETURN count(e) AS n
"""

# entities created without an embedding (ingest embeds them later, off the commit path)
ENTITIES_TO_EMBED = """
MATCH (e:Entity) WHERE e.needs_embedding = true
RETURN e.id AS id, e.name AS name
LIMIT $limit
"""

SET_EMBEDDINGS = """
UNWIND $rows AS row
MATCH (e:Entity {id: row.id})
SET e.embedding = row.embedding
REMOVE e.needs_embedding
"""

ADD_ALIASES = """
UNWIND $rows AS row
MATCH (e:Entity {kb: $kb, id: row.id})
MERGE (a:Alias {kb: $kb, key: row.key})
MERGE (a)-[:ALIAS_OF]->(e)
SET e.aliases = CASE WHEN row.alias IN e.aliases THEN e.aliases ELSE e.aliases + row.alias END
"""
# close the current facts of (subject, predicate) that another accepted value replaces
SUPERSEDE = """
UNWIND $facts AS f
MATCH (s:Entity {kb: $kb, id: f.subject_id})-[r:FACT {predicate: f.predicate}]->()
WHERE r.fact_id <> f.fact_id AND """ + not_ended("r") + """
SET r.valid_to_before = r.valid_to
SET r.valid_to = coalesce(f.valid_from, datetime()), r.superseded_by = f.fact_id
RETURN count(r) AS closed
"""

# a fact taken back (its review undone): the values it superseded hold again as they did before
# (``valid_to_before``: what SUPERSEDE found), then the fact goes
RETRACT_FACT = """
MATCH (s:Entity)-[r:FACT {fact_id: $fact_id}]->()
WHERE r.kb = $kb
CALL (s, r) {
  MATCH (s)-[old:FACT {predicate: r.predicate}]->()
  WHERE old.superseded_by = r.fact_id
  SET old.valid_to = old.valid_to_before
  REMOVE old.superseded_by, old.valid_to_before
  RETURN count(old) AS restored
}
DELETE r
RETURN restored
"""

# a fact that stays (other submissions assert it) but loses a source whose submission was taken back
SET_FACT_SOURCES = """
MATCH ()-[r:FACT {fact_id: $fact_id}]->()
WHERE r.kb = $kb
SET r.sources = $sources
RETURN count(r) AS changed
"""

WRITE_FACTS = """
UNWIND $facts AS f
MATCH (s:Entity {kb: $kb, id: f.subject_id})
MATCH (o:Entity {kb: $kb, id: f.object_id})
MERGE (s)-[r:FACT {fact_id: f.fact_id}]->(o)
  ON CREATE SET r.kb = $kb, r.predicate = f.predicate, r.confidence = f.confidence,
                r.sources = [], r.valid_from = f.valid_from, r.valid_to = f.valid_to,
                r.recorded_at = datetime(), r.status = 'accepted'
SET r.sources = CASE WHEN f.source IS NULL OR f.source IN r.sources THEN r.sources
                     ELSE r.sources + f.source END,
    r.confidence = CASE WHEN f.confidence > r.confidence THEN f.confidence ELSE r.confidence END
RETURN count(r) AS written
"""

# the current facts of each (subject key, predicate) pair: what a new claim may contradict or repeat
CURRENT_FACTS = """
UNWIND $pairs AS p
MATCH (s:Entity {kb: $kb, key: p.key})-[r:FACT {predicate: p.predicate}]->(o:Entity)
WHERE """ + not_ended("r") + """
RETURN p.key AS key, r.fact_id AS fact_id, s.name AS subject, s.id AS subject_id,
       r.predicate AS predicate, o.name AS object, o.id AS object_id, r.sources AS sources,
       r.confidence AS confidence, r.valid_from AS valid_from, r.valid_to AS valid_to
"""

FACTS_BY_ID = """
MATCH (s:Entity)-[r:FACT]->(o:Entity)
WHERE r.fact_id IN $fact_ids AND r.kb = $kb
RETURN r.fact_id AS fact_id, s.name AS subject, s.id AS subject_id, r.predicate AS predicate,
       o.name AS object, o.id AS object_id, r.sources AS sources, r.confidence AS confidence,
       r.valid_from AS valid_from, r.valid_to AS valid_to
"""

COUNT_KB = """
OPTIONAL MATCH (e:Entity {kb: $kb})
WITH count(e) AS entities
OPTIONAL MATCH ()-[r:FACT {kb: $kb}]->()
RETURN entities, count(r) AS facts
"""

# whether the kb holds any entity at all (a query that links nothing may name a kb that does not exist)
KB_HAS_ENTITY = """
MATCH (e:Entity {kb: $kb})
WITH e LIMIT 1
RETURN count(e) > 0 AS found
"""

# deletes a whole knowledge base in bounded transactions (tests and benchmarks reload their kb)
DROP_KB = """
MATCH (e {kb: $kb}) WHERE e:Entity OR e:Alias
CALL (e) { DETACH DELETE e } IN TRANSACTIONS OF 5000 ROWS
"""
