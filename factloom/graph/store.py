"""The graph store: one Neo4j implementation of the operations FactLoom needs.

Writes are batched (``UNWIND``) and idempotent by ``fact_id``; entity identity is the normalised
name (or an alias) within a knowledge base, so every entity and fact belongs to exactly one ``kb``.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, LiteralString, cast

import neo4j
from neo4j import GraphDatabase
from neo4j.exceptions import AuthError, ConstraintError, ServiceUnavailable, SessionExpired

from factloom.graph import queries as q
from factloom.graph.errors import GraphUnavailable, InvalidGraphInput
from factloom.graph.types import FactWrite, StoredFact, entity_key
from factloom.metrics import STORE_SECONDS

__all__ = ["Neo4jStore", "Embed", "entity_id_for", "KB_PATTERN", "check_kb"]

Embed = Callable[[list[str]], list[list[float]]]
KB_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def entity_id_for(kb: str, key: str) -> str:
    """Deterministic, so concurrent creators of one entity agree on its id."""
    return hashlib.sha256(f"{kb}\x1f{key}".encode()).hexdigest()[:24]


def check_kb(kb: str) -> str:
    """``kb`` itself when it is a valid knowledge-base name, else :class:`InvalidGraphInput`."""
    if not KB_PATTERN.match(kb):
        raise InvalidGraphInput(f"invalid knowledge base name {kb!r}")
    return kb


def _native(value: Any) -> Any:
    """Neo4j temporal values to Python ``datetime``."""
    return value.to_native() if hasattr(value, "to_native") else value


# each statement's round trip, failed ones included (factloom_store_seconds{store="neo4j"})
_ROUND_TRIP = {"r": STORE_SECONDS.labels("neo4j", "read"), "w": STORE_SECONDS.labels("neo4j", "write")}


def _keys_and_values(result: neo4j.Result) -> tuple[list[str], list[list[Any]]]:
    return list(result.keys()), result.values()


class Neo4jStore:
    """Neo4j-backed graph store.

    Args:
        uri: Bolt URI, e.g. ``bolt://127.0.0.1:7687``.
        auth: ``(user, password)``.
        database: the database name (Neo4j Community has one user database, ``neo4j``).
    """

    def __init__(self, uri: str, auth: tuple[str, str], database: str = "neo4j") -> None:
        self.uri = uri
        self.database = database
        # schema warnings ("property does not exist" on an empty graph) are noise in the logs
        self._driver = GraphDatabase.driver(
            uri, auth=auth, max_connection_pool_size=50, notifications_min_severity="OFF"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(uri={self.uri!r}, database={self.database!r})"

    def close(self) -> None:
        self._driver.close()

    # ------------------------------------------------------------ plumbing

    def run(self, query: str, routing: str = "w", **params: Any) -> list[dict[str, Any]]:
        """Run one parameterised statement: a write in its own (retried) transaction, a read
        (``routing="r"``) as an auto-commit statement, tried twice."""
        start = time.perf_counter()
        try:
            if routing == "r":
                keys, values = self._read(query, params)
            else:
                keys, values = self._driver.execute_query(
                    cast(LiteralString, query), params, database_=self.database,
                    routing_=neo4j.RoutingControl.WRITE, result_transformer_=_keys_and_values,
                )
        except (ServiceUnavailable, SessionExpired, AuthError) as exc:
            raise GraphUnavailable(f"Neo4j at {self.uri} is unavailable: {exc}") from exc
        finally:
            _ROUND_TRIP["r" if routing == "r" else "w"].observe(time.perf_counter() - start)
        # every statement returns named scalars and lists, so plain zips: ``Record.data()`` walks
        # each value looking for nodes to convert, ~3x the cost on a 500-row retrieval hop
        return [dict(zip(keys, row, strict=True)) for row in values]

    def _read(self, query: str, params: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
        # an auto-commit statement is one round trip (RUN and PULL); a managed transaction adds a
        # BEGIN and a COMMIT, ~0.3 ms of a small read's ~1 ms. The pool drops a connection whose
        # socket it already sees closed, but Neo4j may close one between that look and the RUN
        # (a restart, dbms.killConnection): a read changes nothing, so it is tried once more
        for attempt in range(2):
            try:
                with self._driver.session(database=self.database, default_access_mode=neo4j.READ_ACCESS) as session:
                    return _keys_and_values(session.run(cast(LiteralString, query), params))
            except (ServiceUnavailable, SessionExpired):
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def _run_idempotent(self, query: str, **params: Any) -> list[dict[str, Any]]:
        # two workers may MERGE the same entity or fact at once; the loser's transaction fails the
        # uniqueness constraint, and re-running it finds the winner's node
        for attempt in range(3):
            try:
                return self.run(query, **params)
            except ConstraintError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def ping(self) -> bool:
        try:
            return self.run("RETURN 1 AS ok", routing="r")[0]["ok"] == 1
        except GraphUnavailable:
            return False

    def apply_schema(self) -> None:
        """Create constraints and indexes; safe to repeat."""
        for statement in q.SCHEMA:
            self.run(statement)
        self.run("CALL db.awaitIndexes(300)")

    # ------------------------------------------------------------ entities

    def resolve(self, kb: str, names: Iterable[str]) -> dict[str, str]:
        """Entity ids for the names (or ids) that already exist in ``kb``; unknown names are absent."""
        check_kb(kb)
        names = list(dict.fromkeys(names))
        found: dict[str, str] = {}
        ids = {r["id"] for r in self.run(q.RESOLVE_IDS, routing="r", kb=kb, ids=names)}
        found.update({n: n for n in names if n in ids})
        keys = {n: entity_key(n) for n in names if n not in found}
        if keys:
            rows = self.run(q.RESOLVE_KEYS, routing="r", kb=kb, keys=sorted(set(keys.values())))
            by_key = {r["key"]: r["id"] for r in rows if r["id"]}
            found.update({n: by_key[k] for n, k in keys.items() if k in by_key})
        return found

    def ensure_entities(self, kb: str, names: Iterable[str], embed: Embed | None = None) -> dict[str, str]:
        """Resolve the names, creating the missing entities.

        With ``embed`` the new entities get an embedding of their name at once; without it they are
        flagged, and :meth:`embed_pending` gives them one later, off the write path.
        """
        names = list(dict.fromkeys(names))
        found = self.resolve(kb, names)
        missing: dict[str, str] = {}
        for name in names:
            if name not in found:
                missing.setdefault(entity_key(name), name)
        if missing:
            keys = list(missing)
            vectors: list[list[float]] | list[None] = embed([missing[k] for k in keys]) if embed else [None] * len(keys)
            rows = [
                {"key": k, "id": entity_id_for(kb, k), "name": missing[k], "embedding": v}
                for k, v in zip(keys, vectors, strict=True)
            ]
            self._run_idempotent(q.CREATE_ENTITIES, kb=kb, entities=rows)
            found.update(self.resolve(kb, [n for n in names if n not in found]))
        return found

    def embed_pending(self, embed: Embed, batch: int = 512) -> int:
        """Embed one batch of the entities created without an embedding; returns how many."""
        rows = self.run(q.ENTITIES_TO_EMBED, routing="r", limit=batch)
        if not rows:
            return 0
        vectors = embed([r["name"] for r in rows])
        self.run(q.SET_EMBEDDINGS, rows=[{"id": r["id"], "embedding": v} for r, v in zip(rows, vectors, strict=True)])
        return len(rows)

    def add_aliases(self, kb: str, entity_id: str, aliases: Sequence[str]) -> None:
        rows = [{"id": entity_id, "alias": a, "key": entity_key(a)} for a in aliases]
        self._run_idempotent(q.ADD_ALIASES, kb=check_kb(kb), rows=rows)

    # ------------------------------------------------------------ facts

    def write_facts(self, kb: str, facts: Sequence[FactWrite], embed: Embed | None = None) -> int:
        """Write accepted facts, creating their entities; idempotent by ``fact_id``."""
        if not facts:
            return 0
        ids = self.ensure_entities(kb, [n for f in facts for n in (f.subject, f.object)], embed)
        rows = [
            {
                "fact_id": f.fact_id, "subject_id": ids[f.subject], "object_id": ids[f.object],
                "predicate": f.predicate, "source": f.source, "confidence": f.confidence,
                "valid_from": f.valid_from, "valid_to": f.valid_to,
            }
            for f in facts
        ]
        superseding = [r for r, f in zip(rows, facts, strict=True) if f.supersede]
        if superseding:
            self.run(q.SUPERSEDE, kb=kb, facts=superseding)
        return int(self._run_idempotent(q.WRITE_FACTS, kb=kb, facts=rows)[0]["written"])

    def retract_fact(self, kb: str, fact_id: str) -> int:
        """Take a fact out of the graph; the values it superseded hold again. Returns how many."""
        rows = self.run(q.RETRACT_FACT, kb=check_kb(kb), fact_id=fact_id)
        return int(rows[0]["restored"]) if rows else 0

    def set_fact_sources(self, kb: str, fact_id: str, sources: Sequence[str]) -> None:
        self.run(q.SET_FACT_SOURCES, kb=check_kb(kb), fact_id=fact_id, sources=list(sources))

    def current_facts(self, kb: str, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[StoredFact]]:
        """Current facts per (subject name, predicate): what new claims may repeat or contradict."""
        wanted = {(entity_key(s), p): (s, p) for s, p in pairs}
        out: dict[tuple[str, str], list[StoredFact]] = {v: [] for v in wanted.values()}
        if not wanted:
            return out
        params = [{"key": k, "predicate": p} for k, p in wanted]
        for row in self.run(q.CURRENT_FACTS, routing="r", kb=check_kb(kb), pairs=params):
            out[wanted[(row["key"], row["predicate"])]].append(_stored(row))
        return out

    def entity_types(self, kb: str, names: Iterable[str], type_predicates: Sequence[str]) -> dict[str, list[str]]:
        """Types (normalised keys of the objects of type facts) per entity name; untyped names are absent."""
        by_key: dict[str, list[str]] = {}
        for name in names:
            by_key.setdefault(entity_key(name), []).append(name)
        if not by_key or not type_predicates:
            return {}
        rows = self.run(q.ENTITY_TYPES, routing="r", kb=check_kb(kb), keys=sorted(by_key),
                        type_predicates=list(type_predicates))
        return {name: sorted(r["types"]) for r in rows if r["types"] for name in by_key[r["key"]]}

    def canonical_names(self, kb: str, names: Iterable[str]) -> dict[str, str]:
        """The stored display name of each given name that resolves (by normalised key or alias)."""
        by_key: dict[str, list[str]] = {}
        for name in names:
            by_key.setdefault(entity_key(name), []).append(name)
        if not by_key:
            return {}
        rows = self.run(q.LINK_EXACT, routing="r", kb=check_kb(kb), keys=sorted(by_key))
        return {name: r["name"] for r in rows for name in by_key[r["key"]]}

    def type_counts(
        self, kb: str, type_predicates: Sequence[str]
    ) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
        """(domain, range): predicate → type → how many current facts have a subject (object) of that type."""
        out: list[dict[str, dict[str, int]]] = []
        for query in (q.TYPE_DOMAIN_COUNTS, q.TYPE_RANGE_COUNTS):
            counts: dict[str, dict[str, int]] = {}
            if type_predicates:
                for r in self.run(query, routing="r", kb=check_kb(kb), type_predicates=list(type_predicates)):
                    counts.setdefault(r["predicate"], {})[r["type"]] = int(r["n"])
            out.append(counts)
        return out[0], out[1]

    def accepted_triples(self, kb: str, page: int = 100_000) -> list[tuple[str, str, str]]:
        """Every accepted, current fact of ``kb`` as a (subject, predicate, object) name triple."""
        check_kb(kb)
        out: list[tuple[str, str, str]] = []
        after = ""
        while True:
            rows = self.run(q.ACCEPTED_TRIPLES, routing="r", kb=kb, after=after, limit=page)
            out.extend((r["subject"], r["predicate"], r["object"]) for r in rows)
            if len(rows) < page:
                return out
            after = rows[-1]["fact_id"]

    def facts_by_id(self, kb: str, fact_ids: Sequence[str]) -> list[StoredFact]:
        rows = self.run(q.FACTS_BY_ID, routing="r", kb=check_kb(kb), fact_ids=list(fact_ids))
        return [_stored(r) for r in rows]

    def some_fact(self, kb: str) -> tuple[str, str] | None:
        """(subject name, predicate) of one current fact of ``kb``; ``None`` when it has none."""
        rows = self.run(q.SOME_FACT, routing="r", kb=check_kb(kb))
        return (rows[0]["subject"], rows[0]["predicate"]) if rows else None

    def count(self, kb: str) -> tuple[int, int]:
        """(entities, facts) in ``kb``."""
        row = self.run(q.COUNT_KB, routing="r", kb=check_kb(kb))[0]
        return int(row["entities"]), int(row["facts"])

    def has_entities(self, kb: str) -> bool:
        """Whether ``kb`` holds any entity: a kb exists from its first committed fact on."""
        return bool(self.run(q.KB_HAS_ENTITY, routing="r", kb=check_kb(kb))[0]["found"])

    def drop_kb(self, kb: str) -> None:
        with self._driver.session(database=self.database) as session:
            session.run(q.DROP_KB, kb=check_kb(kb)).consume()

    # ------------------------------------------------------------ backup and restore

    def is_empty(self) -> bool:
        return int(self.run(q.COUNT_ALL, routing="r")[0]["n"]) == 0

    def wipe(self) -> None:
        """Delete every node and relationship (a restore undoing itself in a graph it found empty)."""
        with self._driver.session(database=self.database) as session:
            session.run(q.WIPE_ALL).consume()  # CALL … IN TRANSACTIONS needs an implicit transaction

    def dump(self, label_or_type: str) -> Iterator[dict[str, Any]]:
        """Every node of a label (``{"id", "p"}``) or relationship of a type (``{"a", "b", "p"}``,
        the element ids of its ends), streamed from one read transaction; temporal properties
        come as the driver's ``neo4j.time`` values."""
        if label_or_type in q.LABELS:
            query = q.DUMP_NODES.format(label=label_or_type)
        elif label_or_type in q.REL_TYPES:
            query = q.DUMP_RELATIONSHIPS.format(type=label_or_type)
        else:
            raise InvalidGraphInput(f"no label or relationship type {label_or_type!r}")
        with self._driver.session(database=self.database, default_access_mode=neo4j.READ_ACCESS) as session:
            result = session.run(cast(LiteralString, query))
            keys = result.keys()
            for record in result:
                yield dict(zip(keys, record.values(), strict=True))

    def restore_nodes(self, label: str, rows: Sequence[dict[str, Any]]) -> dict[str, str]:
        """Create the dumped nodes ``rows`` of ``label`` again; {old element id: new element id}."""
        if label not in q.LABELS:
            raise InvalidGraphInput(f"no label {label!r}")
        return {r["old"]: r["new"] for r in self.run(q.RESTORE_NODES.format(label=label), rows=list(rows))}

    def restore_relationships(self, rel_type: str, rows: Sequence[dict[str, Any]]) -> int:
        """Create the dumped relationships ``rows`` again, their ends given as new element ids."""
        if rel_type not in q.REL_TYPES:
            raise InvalidGraphInput(f"no relationship type {rel_type!r}")
        return int(self.run(q.RESTORE_RELATIONSHIPS.format(type=rel_type), rows=list(rows))[0]["n"])


def _stored(row: dict[str, Any]) -> StoredFact:
    valid_from: datetime | None = _native(row["valid_from"])
    valid_to: datetime | None = _native(row["valid_to"])
    return StoredFact(
        fact_id=row["fact_id"], subject=row["subject"], predicate=row["predicate"],
        object=row["object"], sources=list(row["sources"] or []), confidence=float(row["confidence"]),
        valid_from=valid_from, valid_to=valid_to, subject_id=row["subject_id"], object_id=row["object_id"],
    )
