"""An answer's path as a person reads it: walked from the linked entity, each step naming the entity
it reaches, a fact walked against its direction written as such (``←directed_by–``).

The API returns each fact of a path in its stored direction (subject → object); the admin Ask page
and the CLI both read them through :func:`walk`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from factloom.graph.types import entity_key
from factloom.platform.query.schemas import PathStepOut

__all__ = ["Step", "walk", "relation_text", "path_text"]


def relation_text(predicate: str, forward: bool) -> str:
    """A relation as read from one end: "–directed_by→" along the fact, "←directed_by–" against it."""
    return f"–{predicate}→" if forward else f"←{predicate}–"


@dataclass(frozen=True, slots=True)
class Step:
    """One fact of an answer's path as walked from the linked entity: from ``start`` to ``end``,
    ``forward`` when that is the fact's own direction (``start`` is its subject)."""

    fact_id: str
    start: str
    predicate: str
    end: str
    forward: bool
    sources: list[str]


def walk(path: Sequence[PathStepOut], seeds: Iterable[str]) -> list[Step]:
    """The facts of a path (each in its stored direction) as the steps walked from a seed.

    "The genres of the films directed by the director of [Blade Runner]" walks Blade Runner
    –directed_by→ Ridley Scott ←directed_by– Black Rain –has_genre→ Action: read in the stored
    direction, the middle fact would name Ridley Scott twice and Black Rain never.
    """
    if not path:
        return []
    keys = {entity_key(s) for s in seeds}
    first = path[0]
    if entity_key(first.subject) in keys or entity_key(first.object) in keys:
        at = first.subject if entity_key(first.subject) in keys else first.object
    elif len(path) > 1 and entity_key(first.subject) in {entity_key(path[1].subject), entity_key(path[1].object)}:
        at = first.object  # no seed on it: start where it does not meet the next fact
    else:
        at = first.subject
    steps = []
    for fact in path:
        forward = entity_key(fact.subject) == entity_key(at) or entity_key(fact.object) != entity_key(at)
        start, end = (fact.subject, fact.object) if forward else (fact.object, fact.subject)
        steps.append(Step(fact.fact_id, start, fact.predicate, end, forward, list(fact.sources)))
        at = end
    return steps


def path_text(steps: Sequence[Step]) -> str:
    """``Blade Runner –directed_by→ Ridley Scott ←directed_by– Black Rain``."""
    if not steps:
        return ""
    return steps[0].start + "".join(f" {relation_text(s.predicate, s.forward)} {s.end}" for s in steps)
