"""Every Cypher statement FactLoom runs, in one place. Values only ever arrive as parameters.

Entities are ``(:Entity {kb, id, key, name, aliases, embedding})``, each alias also an indexed
``(:Alias {kb, key})-[:ALIAS_OF]->(:Entity)``; facts are
``[:FACT {fact_id, kb, predicate, confidence, sources, valid_from, valid_to, recorded_at, status}]``
relationships between them. A fact is current when ``valid_to`` is null or in the future; nothing is
deleted (superseded facts keep their ``valid_to`` and stay queryable "as of" a date).
"""

from __future__ import annotations

__all__ = ["SCHEMA", "LABELS", "REL_TYPES"]

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

# ---------------------------------------------------------------- writes

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

# ---------------------------------------------------------------- when a fact holds (one place)
# Each fragment names its relationship variable; the queries splice them in with ``+`` (Cypher's own
# braces rule out str.format).


def _not_ended(r: str) -> str:
    """The fact has no end, or ends after now: what a new value supersedes or contradicts."""
    return f"({r}.valid_to IS NULL OR {r}.valid_to > datetime())"


def _current(r: str) -> str:
    """An accepted fact that has not ended: what the graph asserts now (checks, training)."""
    return f"coalesce({r}.status, 'accepted') = 'accepted' AND {_not_ended(r)}"


def _valid_at(r: str, at: str = "at") -> str:
    """The fact's validity interval contains the instant ``at``."""
    return f"({r}.valid_to IS NULL OR {r}.valid_to > {at}) AND ({r}.valid_from IS NULL OR {r}.valid_from <= {at})"


def _servable(r: str) -> str:
    """A fact the query path may use: its status among ``$statuses``, valid at ``at`` ($as_of or now)."""
    return f"coalesce({r}.status, 'accepted') IN $statuses AND {_valid_at(r)}"


# close the current facts of (subject, predicate) that another accepted value replaces
SUPERSEDE = """
UNWIND $facts AS f
MATCH (s:Entity {kb: $kb, id: f.subject_id})-[r:FACT {predicate: f.predicate}]->()
WHERE r.fact_id <> f.fact_id AND """ + _not_ended("r") + """
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
WHERE """ + _not_ended("r") + """
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

# ---------------------------------------------------------------- reads (query path)

# names (or aliases) given exactly, already normalised by ``entity_key``; one row per key that links
LINK_EXACT = """
UNWIND $keys AS key
OPTIONAL MATCH (e:Entity {kb: $kb, key: key})
OPTIONAL MATCH (:Alias {kb: $kb, key: key})-[:ALIAS_OF]->(a:Entity {kb: $kb})
WITH key, coalesce(e, a) AS n
WHERE n IS NOT NULL
RETURN key, n.id AS id, n.name AS name
"""

# Lucene search over names and aliases; the index spans every kb, so ``$fetch`` over-fetches
# before the kb filter; ``$text`` must already have its Lucene syntax escaped
LINK_FULLTEXT = """
CALL db.index.fulltext.queryNodes('entity_names', $text, {limit: $fetch}) YIELD node, score
WHERE node.kb = $kb
RETURN node.id AS id, node.name AS name, score
ORDER BY score DESC
LIMIT $limit
"""

# nearest entity embeddings (cosine, 384-d); shared across kbs like the full-text index
LINK_VECTOR = """
CALL db.index.vector.queryNodes('entity_embedding', $fetch, $vector) YIELD node, score
WHERE node.kb = $kb
RETURN node.id AS id, node.name AS name, score
ORDER BY score DESC
LIMIT $limit
"""

# One hop of the candidate subgraph: the facts around a frontier, in both directions, that were
# valid at ``$as_of`` (null: now) and are servable. ``$per_node`` keeps one hub (genre "Drama", a
# year) from eating the whole budget; ``$seen`` (fact ids fetched at earlier hops) keeps them from
# being fetched again without hiding facts that lead back to a visited entity (a self-loop, "the
# mother of X's son" is X, two neighbours of the seed related to each other).
EXPAND_HOP = """
WITH coalesce($as_of, datetime()) AS at
UNWIND $frontier AS id
MATCH (n:Entity {kb: $kb, id: id})
CALL (n, at) {
  MATCH (n)-[r:FACT]-()
  WHERE r.kb = $kb AND NOT r.fact_id IN $seen AND """ + _servable("r") + """
  RETURN r
  LIMIT $per_node
}
WITH DISTINCT r
LIMIT $limit
WITH r, startNode(r) AS s, endNode(r) AS o
RETURN r.fact_id AS fact_id, r.predicate AS predicate, r.sources AS sources,
       s.id AS source_id, s.name AS source_name, o.id AS target_id, o.name AS target_name
"""

# The admin graphs' neighbourhoods, one row per (entity, predicate, direction): how many current
# facts the relation has and a page of them, neighbours by name. A hub's relation of 4,000 films is
# counted and drawn as a page plus one "+3,975 more" node; ``$predicate`` (with ``$outgoing``) pages
# through one relation of one entity.
RELATION_PAGES = """
WITH coalesce($as_of, datetime()) AS at
UNWIND $frontier AS id
MATCH (n:Entity {kb: $kb, id: id})
CALL (n, at) {
  MATCH (n)-[r:FACT]-(m:Entity)
  WHERE r.kb = $kb AND """ + _servable("r") + """
    AND ($predicate IS NULL OR (r.predicate = $predicate AND (startNode(r) = n) = $outgoing))
  WITH r, m, startNode(r) = n AS outgoing
  ORDER BY m.name, r.fact_id
  WITH r.predicate AS predicate, outgoing,
       collect({fact_id: r.fact_id, sources: r.sources, other_id: m.id, other_name: m.name}) AS facts
  RETURN predicate, outgoing, size(facts) AS total, facts[$skip..$skip + $take] AS page
}
RETURN n.id AS id, n.name AS name, predicate, outgoing, total, page
ORDER BY id, total, predicate, outgoing DESC
"""

# The hop queries match the other end of a fact without reading it: ``WRITE_FACTS`` only links two
# entities of the fact's own kb, so ``r.kb`` says the other end's kb (a node property read per fact
# saved, ~10-15 % of a 3-hop hop).

# The relation keys around each question's frontier entity (``item.q``, ``item.id``): what one hop
# of router-guided retrieval may choose from; ``forward`` is true where the entity is the subject,
# ``facts`` how many of its current facts following the key reads. An entity reads at most
# ``$scan`` of its facts here: a hub ("Drama", 4,000 films) would cost tens of milliseconds to
# count, so beyond that ``degree`` (every fact of the entity, read from Neo4j's degree store without
# touching one) tells the caller to scale the sample's counts.
FRONTIER_RELATIONS = """
WITH coalesce($as_of, datetime()) AS at
UNWIND $items AS item
MATCH (n:Entity {kb: $kb, id: item.id})
CALL (n, at) {
  MATCH (n)-[r:FACT]-()
  WHERE r.kb = $kb AND """ + _servable("r") + """
  WITH r LIMIT $scan
  RETURN r.predicate AS predicate, startNode(r) = n AS forward, count(r) AS facts
}
RETURN item.q AS q, item.id AS id, COUNT { (n)-[:FACT]-() } AS degree, predicate, forward, facts
"""

# what each direction of a guided hop keeps besides its predicates
_GUIDED_KEEP = """
      AND NOT r.fact_id IN $seen[item.q] AND """ + _servable("r")

# One hop of router-guided retrieval for many questions at once: each item is a frontier entity of
# one question (``q``) with the predicates that hop may follow out of it (``fwd``: the entity is the
# subject) and into it (``inv``: the entity is the object); at most ``item.per_node`` facts each,
# none of the question's facts fetched at earlier hops (``$seen[q]``). One row per item, its facts as
# ``[fact_id, predicate, sources, source_id, source_name, target_id, target_name]`` lists: a 3-hop
# batch fetches thousands of facts, and a record each cost ~10 % more time. Each direction is its
# own pattern, and one with no predicates is not expanded: Neo4j keeps a dense node's facts by
# direction, so a hub ("Drama": 4,000 facts, all incoming) asked for a forward relation reads none.
GUIDED_HOP = """
WITH coalesce($as_of, datetime()) AS at
UNWIND $items AS item
MATCH (n:Entity {kb: $kb, id: item.id})
CALL (n, item, at) {
  CALL (n, item, at) {
    WITH * WHERE size(item.fwd) > 0
    MATCH (n)-[r:FACT]->()
    WHERE r.kb = $kb AND r.predicate IN item.fwd""" + _GUIDED_KEEP + """
    RETURN r
    UNION
    WITH * WHERE size(item.inv) > 0
    MATCH (n)<-[r:FACT]-()
    WHERE r.kb = $kb AND r.predicate IN item.inv""" + _GUIDED_KEEP + """
    RETURN r
  }
  RETURN r
  LIMIT $per_node
}
WITH item, collect(r)[..item.per_node] AS rs
WHERE size(rs) > 0
RETURN item.q AS q, item.id AS via,
       [r IN rs | [r.fact_id, r.predicate, r.sources, startNode(r).id, startNode(r).name,
                   endNode(r).id, endNode(r).name]] AS facts
"""

# one current fact of a kb, for a question that warms a new API process's models up
SOME_FACT = """
MATCH (s:Entity {kb: $kb})-[r:FACT]->()
WHERE r.kb = $kb AND """ + _current("r") + """
RETURN s.name AS subject, r.predicate AS predicate
LIMIT 1
"""

# the predicates of a kb's current facts (the router plans over them)
KB_PREDICATES = """
MATCH ()-[r:FACT]->()
WHERE r.kb = $kb AND coalesce(r.status, 'accepted') IN $statuses
RETURN DISTINCT r.predicate AS predicate
"""

# ---------------------------------------------------------------- reads (admin UI: graph explorer)

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
  AND ($history OR (""" + _valid_at("r") + """))
WITH n, r, m, at
ORDER BY r.predicate, m.name
LIMIT $limit
RETURN r.fact_id AS fact_id, r.predicate AS predicate, coalesce(r.sources, []) AS sources,
       r.confidence AS confidence, r.valid_from AS valid_from, r.valid_to AS valid_to,
       r.recorded_at AS recorded_at, r.superseded_by AS superseded_by, coalesce(r.status, 'accepted') AS status,
       startNode(r) = n AS outgoing, m.id AS other_id, m.name AS other_name,
       """ + _valid_at("r") + """ AS valid_at
"""

# ---------------------------------------------------------------- reads (check stage, training)

# the types of these entities (keys): objects of their current type facts (``$type_predicates``)
ENTITY_TYPES = """
UNWIND $keys AS key
MATCH (e:Entity {kb: $kb, key: key})-[t:FACT]->(ty:Entity)
WHERE t.kb = $kb AND t.predicate IN $type_predicates
  AND """ + _current("t") + """
RETURN key, collect(DISTINCT ty.key) AS types
"""

# how often each type occurs on the subject side of each predicate, over the kb's current facts;
# starts from the type facts (predicate index), so a kb without any costs one index lookup
TYPE_DOMAIN_COUNTS = """
MATCH (e:Entity)-[t:FACT]->(ty:Entity)
WHERE t.predicate IN $type_predicates AND t.kb = $kb
  AND """ + _current("t") + """
WITH e, collect(DISTINCT ty.key) AS types
MATCH (e)-[r:FACT]->(:Entity)
WHERE r.kb = $kb AND NOT r.predicate IN $type_predicates
  AND """ + _current("r") + """
UNWIND types AS type
RETURN r.predicate AS predicate, type, count(*) AS n
"""

# the same on the object side
TYPE_RANGE_COUNTS = """
MATCH (e:Entity)-[t:FACT]->(ty:Entity)
WHERE t.predicate IN $type_predicates AND t.kb = $kb
  AND """ + _current("t") + """
WITH e, collect(DISTINCT ty.key) AS types
MATCH (:Entity)-[r:FACT]->(e)
WHERE r.kb = $kb AND NOT r.predicate IN $type_predicates
  AND """ + _current("r") + """
UNWIND types AS type
RETURN r.predicate AS predicate, type, count(*) AS n
"""

# one page of the kb's accepted, current facts as name triples (scorer training), keyset by fact_id
ACCEPTED_TRIPLES = """
MATCH (s:Entity)-[r:FACT]->(o:Entity)
WHERE r.kb = $kb AND r.fact_id > $after
  AND """ + _current("r") + """
RETURN r.fact_id AS fact_id, s.name AS subject, r.predicate AS predicate, o.name AS object
ORDER BY r.fact_id
LIMIT $limit
"""

# ---------------------------------------------------------------- backup and restore

# every node of a label (from LABELS), every relationship of a type (from REL_TYPES), with its
# properties; restore creates them again in an empty graph, mapping the old element ids to the new
DUMP_NODES = "MATCH (n:{label}) RETURN elementId(n) AS id, properties(n) AS p"
DUMP_RELATIONSHIPS = "MATCH (a)-[r:{type}]->(b) RETURN elementId(a) AS a, elementId(b) AS b, properties(r) AS p"
RESTORE_NODES = """
UNWIND $rows AS row
CREATE (n:{label})
SET n = row.p
RETURN row.id AS old, elementId(n) AS new
"""
RESTORE_RELATIONSHIPS = """
UNWIND $rows AS row
MATCH (a) WHERE elementId(a) = row.a
MATCH (b) WHERE elementId(b) = row.b
CREATE (a)-[r:{type}]->(b)
SET r = row.p
RETURN count(r) AS n
"""
COUNT_ALL = "MATCH (n) RETURN count(n) AS n"
# what a failed restore wrote into the graph it found empty
WIPE_ALL = "MATCH (n) CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 5000 ROWS"
