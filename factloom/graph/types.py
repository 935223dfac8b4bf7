"""Plain values that cross the graph boundary, and the identity rules of entities and facts."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["FactWrite", "StoredFact", "entity_key", "fact_id_for", "Edge", "Subgraph", "Seed", "RelationKey"]

_SPACE = re.compile(r"\s+")
# a relation as followed from an entity: (predicate, forward: the entity is the fact's subject)
RelationKey = tuple[str, bool]


def entity_key(name: str) -> str:
    """The normalised form under which an entity name is resolved: NFKC, case-folded, one space."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", name)).strip().casefold()


def fact_id_for(kb: str, subject: str, predicate: str, obj: str) -> str:
    """One graph fact per (kb, subject, predicate, object), whichever source asserts it."""
    raw = "\x1f".join((kb, entity_key(subject), predicate, entity_key(obj)))
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class FactWrite:
    """An accepted fact to write; ``subject`` and ``object`` are entity names (resolved by key)."""

    fact_id: str
    subject: str
    predicate: str
    object: str
    source: str | None = None
    confidence: float = 1.0
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    # close the currently valid facts of (subject, predicate) that have another object
    supersede: bool = False


@dataclass(frozen=True, slots=True)
class StoredFact:
    fact_id: str
    subject: str
    predicate: str
    object: str
    sources: list[str]
    confidence: float
    valid_from: datetime | None
    valid_to: datetime | None
    subject_id: str = ""
    object_id: str = ""


@dataclass(frozen=True, slots=True)
class Seed:
    entity_id: str
    name: str
    score: float
    how: str  # "exact", "fulltext", "vector"


@dataclass(frozen=True, slots=True)
class Edge:
    fact_id: str
    source_id: str
    target_id: str
    predicate: str
    sources: tuple[str, ...] = ()


@dataclass(slots=True)
class Subgraph:
    """Entities (id → name) and facts around some seeds, as pulled from Neo4j."""

    seeds: list[Seed]
    names: dict[str, str] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    truncated: bool = False
