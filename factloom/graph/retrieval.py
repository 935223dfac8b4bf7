"""Candidate-subgraph extraction: the facts within a few hops of the seed entities.

The expansion goes hop by hop from a frontier of entity ids rather than as one variable-length
pattern, because ``(s)-[*..3]-(x)`` enumerates paths, and around a hub (genre "Drama", year 1999)
their number explodes long before any ``LIMIT`` applies; per hop, the work is bounded by the budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from factloom.graph import queries as q
from factloom.graph.errors import InvalidGraphInput
from factloom.graph.store import Neo4jStore, check_kb
from factloom.graph.types import Edge, Seed, Subgraph

__all__ = ["k_hop_subgraph", "SERVABLE_STATUSES"]

# facts in any other state (pending, rejected, retracted…) never reach an answer
SERVABLE_STATUSES: tuple[str, ...] = ("accepted",)
# the least a frontier node may fetch even when the frontier is wide
_MIN_PER_NODE = 25


def k_hop_subgraph(
    store: Neo4jStore, *, kb: str, seeds: Sequence[Seed], hops: int, max_edges: int,
    as_of: datetime | None = None,
) -> Subgraph:
    """The current facts within ``hops`` of ``seeds`` in ``kb``, at most ``max_edges`` of them.

    Both directions are followed. ``as_of`` (null: now) selects the facts valid at that moment, so
    a superseded fact is seen by a question about the past. ``truncated`` is true when the budget
    (``max_edges`` overall, or the per-node share of a hub) cut the expansion short, i.e. when more
    hops or edges existed than were returned.
    """
    check_kb(kb)
    if hops < 0 or max_edges < 0:
        raise InvalidGraphInput("hops and max_edges must not be negative")
    if as_of is not None and as_of.tzinfo is None:
        # Neo4j compares a local datetime with a zoned one as null, which would hide every fact
        as_of = as_of.replace(tzinfo=UTC)

    graph = Subgraph(seeds=list(seeds), names={s.entity_id: s.name for s in seeds})
    seen: set[str] = set()
    visited: set[str] = set()
    frontier = list(dict.fromkeys(s.entity_id for s in seeds))
    for _ in range(hops):
        remaining = max_edges - len(graph.edges)
        if not frontier:
            break
        if remaining <= 0:
            graph.truncated = True
            break
        per_node = max(_MIN_PER_NODE, remaining // len(frontier))
        visited.update(frontier)
        rows = store.run(
            q.EXPAND_HOP, routing="r", kb=kb, frontier=frontier, seen=sorted(seen),
            statuses=list(SERVABLE_STATUSES), as_of=as_of, per_node=per_node, limit=remaining + 1,
        )
        if len(rows) > remaining:
            graph.truncated = True
            rows = rows[:remaining]
        per_source: dict[str, int] = {}
        new: dict[str, None] = {}
        for row in rows:
            if row["fact_id"] in seen:
                continue
            seen.add(row["fact_id"])
            graph.edges.append(
                Edge(
                    fact_id=row["fact_id"], source_id=row["source_id"], target_id=row["target_id"],
                    predicate=row["predicate"], sources=tuple(row["sources"] or ()),
                )
            )
            graph.names.setdefault(row["source_id"], row["source_name"])
            graph.names.setdefault(row["target_id"], row["target_name"])
            for node in (row["source_id"], row["target_id"]):
                if node in visited:
                    per_source[node] = per_source.get(node, 0) + 1
                else:
                    new[node] = None
        if any(n >= per_node for n in per_source.values()):
            graph.truncated = True  # a hub gave only its share
        frontier = list(new)
    return graph
