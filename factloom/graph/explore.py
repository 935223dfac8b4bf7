"""Reads for people browsing the graph (the admin UI): entity search, one entity's facts, neighbourhoods.

The query path (:mod:`factloom.graph.retrieval`) reads subgraphs for a model; these read what a
reviewer looks at: names with their degree, facts with provenance and validity, superseded ones
included on request, and small one-hop neighbourhoods that the browser expands node by node. A
hub's neighbourhood is summarised, relation by relation, rather than drawn whole (a director of 200
films would bury the one fact a reviewer came for); the rest of a relation comes page by page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from factloom.graph import queries as q
from factloom.graph.linking import lucene_escape
from factloom.graph.retrieval import SERVABLE_STATUSES
from factloom.graph.store import Neo4jStore, check_kb
from factloom.graph.types import Edge, entity_key

__all__ = ["EntityHit", "EntityFact", "MoreOf", "Neighbourhood", "search_entities", "get_entity", "entity_facts",
           "neighbourhood", "relation_page", "share"]

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


@dataclass(frozen=True, slots=True)
class MoreOf:
    """A relation of a busy entity whose neighbours are not all drawn: the first ``shown`` of ``total``
    (by name) are; a summary node stands for the rest."""

    entity_id: str
    predicate: str
    outgoing: bool
    shown: int
    total: int


@dataclass(slots=True)
class Neighbourhood:
    names: dict[str, str]
    edges: list[Edge]
    truncated: bool  # some relation is summarised (see ``more``) or the whole was cut at its limit
    more: list[MoreOf] = field(default_factory=list)


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
    per_node: int = 25, limit: int = 300,
) -> Neighbourhood:
    """The servable facts one hop around ``entity_ids`` valid at ``as_of``.

    An entity with more than ``per_node`` neighbours is summarised: its ``per_node`` are shared
    between its relations (see :func:`share`), and each relation with neighbours left over is one
    :class:`MoreOf`. At most ``limit`` facts in all.
    """
    check_kb(kb)
    frontier = list(dict.fromkeys(entity_ids))
    rows = store.run(
        q.RELATION_PAGES, routing="r", kb=kb, frontier=frontier, statuses=list(SERVABLE_STATUSES),
        as_of=_zoned(as_of), predicate=None, outgoing=True, skip=0, take=per_node,
    ) if frontier else []
    graph = Neighbourhood(names={}, edges=[], truncated=False)
    for entity_rows in _by_entity(rows):
        shares = share([int(r["total"]) for r in entity_rows], per_node)
        for row, drawn in zip(entity_rows, shares, strict=True):
            _draw(graph, row, drawn, skip=0)
    if len(graph.edges) > limit:
        del graph.edges[limit:]
        graph.truncated = True
    return graph


def relation_page(
    store: Neo4jStore, *, kb: str, entity_id: str, predicate: str, outgoing: bool, skip: int,
    as_of: datetime | None = None, take: int = 25,
) -> Neighbourhood:
    """The next ``take`` neighbours of one relation of an entity, after the ``skip`` drawn already."""
    rows = store.run(
        q.RELATION_PAGES, routing="r", kb=check_kb(kb), frontier=[entity_id], statuses=list(SERVABLE_STATUSES),
        as_of=_zoned(as_of), predicate=predicate, outgoing=outgoing, skip=max(skip, 0), take=take,
    )
    graph = Neighbourhood(names={}, edges=[], truncated=False)
    for row in rows:
        _draw(graph, row, take, skip=max(skip, 0))
    return graph


def share(totals: Sequence[int], budget: int) -> list[int]:
    """How many neighbours of each relation to draw: small relations whole, the budget left split
    evenly between the big ones (water-filling), so one relation of 200 films does not crowd out
    the director and the release year."""
    shares = [0] * len(totals)
    left = budget
    order = sorted(range(len(totals)), key=lambda i: totals[i])
    for done, i in enumerate(order):
        shares[i] = min(totals[i], left // (len(totals) - done))
        left -= shares[i]
    return shares


def _by_entity(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["id"], []).append(row)
    return list(groups.values())


def _draw(graph: Neighbourhood, row: dict[str, Any], drawn: int, *, skip: int) -> None:
    """Add the first ``drawn`` facts of a relation's page to ``graph``, and a MoreOf for the rest."""
    entity_id, outgoing = row["id"], bool(row["outgoing"])
    graph.names.setdefault(entity_id, row["name"])
    page = row["page"][:drawn]
    seen = {e.fact_id for e in graph.edges}  # a fact between two frontier entities comes from both
    for fact in page:
        if fact["fact_id"] in seen:
            continue
        graph.names.setdefault(fact["other_id"], fact["other_name"])
        source, target = (entity_id, fact["other_id"]) if outgoing else (fact["other_id"], entity_id)
        graph.edges.append(Edge(fact_id=fact["fact_id"], source_id=source, target_id=target,
                                predicate=row["predicate"], sources=tuple(fact["sources"] or ())))
    shown, total = skip + len(page), int(row["total"])
    if shown < total:
        graph.more.append(MoreOf(entity_id, row["predicate"], outgoing, shown=shown, total=total))
        graph.truncated = True
