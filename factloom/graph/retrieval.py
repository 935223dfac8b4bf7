"""Candidate-subgraph extraction: the facts within a few hops of the seed entities.

The expansion goes hop by hop from a frontier of entity ids rather than as one variable-length
pattern, because ``(s)-[*..3]-(x)`` enumerates paths, and around a hub (genre "Drama", year 1999)
their number explodes long before any ``LIMIT`` applies; per hop, the work is bounded by the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from factloom.graph import queries as q
from factloom.graph.errors import InvalidGraphInput
from factloom.graph.store import Neo4jStore, check_kb
from factloom.graph.types import Edge, RelationKey, Seed, Subgraph

__all__ = ["k_hop_subgraph", "guided_subgraphs", "kb_predicates", "Choose", "Guess", "SERVABLE_STATUSES"]

# facts in any other state (pending, rejected, retracted…) never reach an answer
SERVABLE_STATUSES: tuple[str, ...] = ("accepted",)
# the least a frontier node may fetch even when the frontier is wide
_MIN_PER_NODE = 25
# the most facts of one frontier entity the relations query reads: beyond it, an entity is a hub
# whose relations are those of its first ``HUB_SCAN`` facts, their counts scaled to its degree
HUB_SCAN = 500


# (question, hop, the relation keys around that question's frontier with the number of facts each
# would read there, in key order) → the keys to follow
Choose = Callable[[int, int, dict[RelationKey, int]], Sequence[RelationKey]]
# (question, hop) → the relation keys to follow without knowing which are around the frontier, or
# None: ask
Guess = Callable[[int, int], Sequence[RelationKey] | None]


def _as_of(as_of: datetime | None) -> datetime | None:
    # Neo4j compares a local datetime with a zoned one as null, which would hide every fact
    return as_of.replace(tzinfo=UTC) if as_of is not None and as_of.tzinfo is None else as_of


def kb_predicates(store: Neo4jStore, kb: str) -> list[str]:
    """The predicates of ``kb``'s servable facts, sorted."""
    check_kb(kb)
    rows = store.run(q.KB_PREDICATES, routing="r", kb=kb, statuses=list(SERVABLE_STATUSES))
    return sorted(r["predicate"] for r in rows)


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
    as_of = _as_of(as_of)
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


def guided_subgraphs(
    store: Neo4jStore, *, kb: str, seeds: Sequence[Sequence[Seed]], choose: Choose, hops: int | Sequence[int],
    max_edges: int, as_of: datetime | None = None, guess: Guess | None = None,
) -> list[Subgraph]:
    """Per question (its ``seeds``), the current facts reached by following at each hop only the
    relations ``choose`` picks among those around the hop's frontier: two small store round trips
    per hop (the frontier's relation keys, then the chosen facts) for all the questions together.

    With ``guess``, a question's last hop may skip the first of the two: where ``guess`` names
    relations (``None``: it cannot tell) they are followed without asking the store which are
    around the frontier, and only a question whose guess reaches nothing is asked and chosen for
    as above (one more pair of round trips for those alone). The last hop's frontier is the widest
    (a 3-hop MetaQA batch asked about ~2,400 entities there, a quarter of its store time), and a
    confident router's guess is what ``choose`` would pick.

    Unlike :func:`k_hop_subgraph` the frontier of the next hop is every entity this hop reached,
    visited or not ("the actors of the films of X's director" passes back through X), also over
    facts fetched at an earlier hop (which are not fetched again). ``max_edges`` bounds each
    question; ``truncated`` says it, or a hub's per-node share, cut the expansion short. ``hops`` is
    the same for every question or one per question: a question's last frontier is not asked for
    its relations (a 1-hop question's answers are often a hub, "Drama", whose thousands of facts
    that query would read for nothing).
    """
    check_kb(kb)
    depth = [hops] * len(seeds) if isinstance(hops, int) else list(hops)
    if len(depth) != len(seeds):
        raise InvalidGraphInput(f"{len(depth)} hop counts for {len(seeds)} questions")
    if any(h < 0 for h in depth) or max_edges < 0:
        raise InvalidGraphInput("hops and max_edges must not be negative")
    as_of = _as_of(as_of)
    statuses = list(SERVABLE_STATUSES)
    graphs = [Subgraph(seeds=list(s), names={x.entity_id: x.name for x in s}) for s in seeds]
    seen: list[set[str]] = [set() for _ in seeds]
    around: list[dict[str, list[tuple[RelationKey, str]]]] = [{} for _ in seeds]  # entity → (key, other end)
    frontiers = [list(dict.fromkeys(x.entity_id for x in s)) for s in seeds]

    # per question asked at this hop: the relation keys around each of its frontier entities
    keys_at: dict[int, dict[str, set[RelationKey]]] = {}

    def ask(hop: int, questions: list[int]) -> dict[int, Sequence[RelationKey]]:
        # the relation keys around each question's frontier, and ``choose``'s pick among them
        wanted = [{"q": i, "id": node} for i in questions for node in frontiers[i]]
        rows: dict[tuple[int, str], list[tuple[RelationKey, int]]] = {}
        degree: dict[tuple[int, str], int] = {}
        if wanted:
            for row in store.run(q.FRONTIER_RELATIONS, routing="r", kb=kb, items=wanted, statuses=statuses,
                                 as_of=as_of, scan=HUB_SCAN):
                at = (row["q"], row["id"])
                rows.setdefault(at, []).append(((row["predicate"], row["forward"]), row["facts"]))
                degree[at] = row["degree"]
        present: dict[int, dict[RelationKey, int]] = {}
        for (i, node), found in rows.items():
            read = sum(n for _, n in found)
            # a hub: its first facts read, their counts scaled to its degree (rounded up)
            full = degree[(i, node)] if read >= HUB_SCAN else read
            around_i = present.setdefault(i, {})
            for key, n in found:
                around_i[key] = around_i.get(key, 0) - (-n * full // read)
            keys_at.setdefault(i, {})[node] = {key for key, _ in found}
        return {i: choose(i, hop, dict(sorted(present[i].items()))) for i in questions if i in present}

    def follow(chosen: dict[int, Sequence[RelationKey]], reached: list[dict[str, None]]) -> None:
        # one store round trip for the chosen relations' facts around the questions' frontiers
        items: list[dict[str, Any]] = []
        per_node = _MIN_PER_NODE
        for i, keys in chosen.items():
            frontier = frontiers[i]
            if not keys:
                continue
            # the facts fetched at earlier hops are not fetched again, but they still lead on
            allowed = set(keys)
            for node in frontier:
                for key, other in around[i].get(node, ()):
                    if key in allowed:
                        reached[i][other] = None
            share = max(_MIN_PER_NODE, (max_edges - len(graphs[i].edges)) // len(frontier))
            per_node = max(per_node, share)
            fwd = sorted({p for p, forward in keys if forward})
            inv = sorted({p for p, forward in keys if not forward})
            # an entity asked about is fetched from only where a chosen relation is around it (a
            # hub's "Drama" scanned for "starred_actors" would read its 4,000 facts for none)
            asked = keys_at.get(i)
            items += [{"q": i, "id": node, "fwd": fwd, "inv": inv, "per_node": share} for node in frontier
                      if asked is None or not asked.get(node, set()).isdisjoint(allowed)]
        if not items:
            return
        rows = store.run(q.GUIDED_HOP, routing="r", kb=kb, items=items, statuses=statuses, as_of=as_of,
                         per_node=per_node, seen=[sorted(x) for x in seen])
        fetched: dict[tuple[int, str], int] = {}
        for row in rows:
            i, via = row["q"], row["via"]
            g = graphs[i]
            fetched[(i, via)] = len(row["facts"])
            for fact_id, predicate, sources, source_id, source_name, target_id, target_name in row["facts"]:
                reached[i][target_id if source_id == via else source_id] = None
                if fact_id in seen[i]:
                    continue  # two frontier entities share it
                if len(g.edges) >= max_edges:
                    g.truncated = True
                    continue
                seen[i].add(fact_id)
                around[i].setdefault(source_id, []).append(((predicate, True), target_id))
                around[i].setdefault(target_id, []).append(((predicate, False), source_id))
                g.edges.append(Edge(fact_id=fact_id, source_id=source_id, target_id=target_id,
                                    predicate=predicate, sources=tuple(sources or ())))
                g.names.setdefault(source_id, source_name)
                g.names.setdefault(target_id, target_name)
        for item in items:
            if fetched.get((item["q"], item["id"]), 0) >= item["per_node"]:
                graphs[item["q"]].truncated = True  # a hub gave only its share

    for hop in range(max(depth, default=0)):
        for i, g in enumerate(graphs):
            if hop >= depth[i]:
                frontiers[i] = []
            elif frontiers[i] and len(g.edges) >= max_edges:
                g.truncated = True
                frontiers[i] = []
        active = [i for i, frontier in enumerate(frontiers) if frontier]
        if not active:
            break
        keys_at.clear()
        guessed: dict[int, Sequence[RelationKey]] = {}
        for i in active:
            keys = guess(i, hop) if guess is not None and hop == depth[i] - 1 else None
            if keys is not None:
                guessed[i] = keys
        reached: list[dict[str, None]] = [{} for _ in seeds]
        follow({**ask(hop, [i for i in active if i not in guessed]), **guessed}, reached)
        missed = [i for i in guessed if not reached[i]]
        if missed:
            follow(ask(hop, missed), reached)
        frontiers = [list(r) for r in reached]
    return graphs
