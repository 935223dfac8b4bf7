"""The query path's reads: entity linking (exact names, full text, vectors), hop-by-hop expansion
(k-hop and router-guided), the relation pages the admin graphs draw, and what warms a new process up.
"""

from __future__ import annotations

from factloom.graph.queries.validity import current, servable, status

__all__ = [
    "LINK_EXACT", "LINK_FULLTEXT", "LINK_VECTOR", "EXPAND_HOP", "RELATION_PAGES", "FRONTIER_RELATIONS",
    "GUIDED_HOP", "SOME_FACT", "KB_PREDICATES",
]

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
  WHERE r.kb = $kb AND NOT r.fact_id IN $seen AND """ + servable("r") + """
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
  WHERE r.kb = $kb AND """ + servable("r") + """
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
  WHERE r.kb = $kb AND """ + servable("r") + """
  WITH r LIMIT $scan
  RETURN r.predicate AS predicate, startNode(r) = n AS forward, count(r) AS facts
}
RETURN item.q AS q, item.id AS id, COUNT { (n)-[:FACT]-() } AS degree, predicate, forward, facts
"""

# what each direction of a guided hop keeps besides its predicates
_GUIDED_KEEP = """
      AND NOT r.fact_id IN $seen[item.q] AND """ + servable("r")

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
WHERE r.kb = $kb AND """ + current("r") + """
RETURN s.name AS subject, r.predicate AS predicate
LIMIT 1
"""

# the predicates of a kb's current facts (the router plans over them)
KB_PREDICATES = """
MATCH ()-[r:FACT]->()
WHERE r.kb = $kb AND """ + status("r") + """ IN $statuses
RETURN DISTINCT r.predicate AS predicate
"""
