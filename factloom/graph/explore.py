"""Reads for people browsing the graph (the admin UI): entity search, one entity's facts, neighbourhoods.

The query path (:mod:`factloom.graph.retrieval`) reads subgraphs for a model; these read what a
reviewer looks at: names with their degree, facts with provenance and validity, superseded ones
included on request, and small one-hop neighbourhoods that the browser expands node by node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from factloom.graph import queries as q
from factloom.graph.linking import lucene_escape
from factloom.graph.retrieval import SERVABLE_STATUSES
from factloom.graph.store import Neo4jStore, check_kb
from factloom.graph.types import Edge, entity_key

__all__ = ["EntityHit", "EntityFact", "Neighbourhood", "search_entities", "get_entity", "entity_facts",
           "neighbourhood"]

_SEARCH_OVERFETCH = 10


@dataclass(frozen=True, slots=True)
class EntityHit:
    id: str
    name: str
    aliases: list[str]
    degree: int
    score: float
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class EntityFact:
    """A fact seen from one entity: ``outgoing`` when the entity is its subject."""

    fact_id: str
    predicate: str
    outgoing: bool
    other_id: str
    other_name: str
    sources: list[str]
    confidence: float | None
    valid_from: datetime | None
    valid_to: datetime | None
    recorded_at: datetime | None
    superseded_by: str | None
    status: str
    valid_at: bool


@dataclass(slots=True)
class Neighbourhood:
    names: dict[str, str]
    edges: list[Edge]
    truncated: bool


def _native(value: Any) -> Any:
    return value.to_native() if hasattr(value, "to_native") else value


def _zoned(as_of: datetime | None) -> datetime | None:
    # Neo4j compares a local datetime with a zoned one as null, which would hide every fact
    return as_of.replace(tzinfo=UTC) if as_of is not None and as_of.tzinfo is None else as_of


def search_entities(store: Neo4jStore, *, kb: str, text: str, limit: int = 20) -> list[EntityHit]:
    """Entities of ``kb`` whose name or alias matches ``text``: an exact name first, then full-text."""
    check_kb(kb)
    text = text.strip()
    if not text or limit < 1:
        return []
    hits: dict[str, EntityHit] = {}
    for row in store.run(q.LINK_EXACT, routing="r", kb=kb, keys=[entity_key(text)]):
        found = get_entity(store, kb=kb, entity_id=row["id"])
        if found is not None:
            hits[found.id] = EntityHit(found.id, found.name, found.aliases, found.degree, score=float("inf"))
    terms = [lucene_escape(t) for t in text.split() if t.strip()]
    terms = [t for t in terms if t]
    if terms:
        # every term must match; the last one is a prefix, so results appear while typing
        lucene = " AND ".join([*terms[:-1], terms[-1] + "*"])
        rows = store.run(q.SEARCH_ENTITIES, routing="r", kb=kb, text=lucene, fetch=limit * _SEARCH_OVERFETCH,
                         limit=limit)
        for row in rows:
            hits.setdefault(row["id"], EntityHit(row["id"], row["name"], list(row["aliases"]), int(row["degree"]),
                                                 float(row["score"])))
    return list(hits.values())[:limit]


def get_entity(store: Neo4jStore, *, kb: str, entity_id: str) -> EntityHit | None:
    rows = store.run(q.ENTITY, routing="r", kb=check_kb(kb), id=entity_id)
    if not rows:
        return None
    row = rows[0]
    return EntityHit(row["id"], row["name"], list(row["aliases"]), int(row["degree"]), 1.0,
                     created_at=_native(row["created_at"]))


def entity_facts(
    store: Neo4jStore, *, kb: str, entity_id: str, as_of: datetime | None = None, history: bool = False,
    limit: int = 500,
) -> list[EntityFact]:
    """The facts of an entity valid at ``as_of`` (null: now), or all of them with ``history``."""
    rows = store.run(q.ENTITY_FACTS, routing="r", kb=check_kb(kb), id=entity_id, as_of=_zoned(as_of),
                     history=history, limit=limit)
    return [
        EntityFact(
            fact_id=r["fact_id"], predicate=r["predicate"], outgoing=bool(r["outgoing"]), other_id=r["other_id"],
            other_name=r["other_name"], sources=list(r["sources"]),
            confidence=None if r["confidence"] is None else float(r["confidence"]),
            valid_from=_native(r["valid_from"]), valid_to=_native(r["valid_to"]),
            recorded_at=_native(r["recorded_at"]), superseded_by=r["superseded_by"], status=r["status"],
            valid_at=bool(r["valid_at"]),
        )
        for r in rows
    ]


def neighbourhood(
    store: Neo4jStore, *, kb: str, entity_ids: Sequence[str], as_of: datetime | None = None,
    per_node: int = 30, limit: int = 300,
) -> Neighbourhood:
    """The servable facts one hop around ``entity_ids`` valid at ``as_of``, at most ``per_node`` each."""
    check_kb(kb)
    frontier = list(dict.fromkeys(entity_ids))
    if not frontier:
        return Neighbourhood(names={}, edges=[], truncated=False)
    rows = store.run(
        q.EXPAND_HOP, routing="r", kb=kb, frontier=frontier, seen=[], statuses=list(SERVABLE_STATUSES),
        as_of=_zoned(as_of), per_node=per_node, limit=limit + 1,
    )
    truncated = len(rows) > limit
    rows = rows[:limit]
    names: dict[str, str] = {}
    edges: list[Edge] = []
    per_source: dict[str, int] = {}
    for row in rows:
        names.setdefault(row["source_id"], row["source_name"])
        names.setdefault(row["target_id"], row["target_name"])
        edges.append(Edge(fact_id=row["fact_id"], source_id=row["source_id"], target_id=row["target_id"],
                          predicate=row["predicate"], sources=tuple(row["sources"] or ())))
        for node in (row["source_id"], row["target_id"]):
            if node in frontier:
                per_source[node] = per_source.get(node, 0) + 1
    if any(n >= per_node for n in per_source.values()):
        truncated = True  # a hub gave only its share
    return Neighbourhood(names=names, edges=edges, truncated=truncated)
