"""Small hand-made graphs that several tests load."""

from __future__ import annotations

import io
from typing import Any

from PIL import Image

FAMILY = [
    ("anna", "spouse", "bob"), ("bob", "parents", "carl"), ("carl", "place_of_birth", "dover"),
    ("bob", "place_of_birth", "york"), ("anna", "place_of_birth", "leeds"), ("anna", "children", "dan"),
    ("dan", "place_of_birth", "hull"), ("carl", "spouse", "eve"), ("eve", "place_of_birth", "bath"),
    ("fay", "spouse", "gus"), ("gus", "parents", "hal"), ("hal", "place_of_birth", "ely"),
    ("gus", "place_of_birth", "wells"), ("fay", "children", "ian"), ("ian", "place_of_birth", "ripon"),
]
"""Two families: spouses, parents, children and birthplaces, for questions of one to three hops."""

FAMILY_QUESTIONS = [
    ("where was the spouse of [{}] born", {"anna": "york", "fay": "wells"}),
    ("what is the birthplace of [{}] 's husband 's father", {"anna": "dover", "fay": "ely"}),
    ("where was the child of [{}] born", {"anna": "hull", "fay": "ripon"}),
]
"""Question templates over FAMILY, each with its answer per family's seed."""

GENRES = ["Drama", "Comedy", "Horror", "Western"]


def films(first: int, last: int) -> list[tuple[str, str, str]]:
    """Films with a director and the genre their director always makes: a graph whose held-out facts
    a scorer can predict (a film's genre from the films that share its director)."""
    rows = [(f"Film {i}", "directed_by", f"Director {i % 8}") for i in range(first, last)]
    return rows + [(f"Film {i}", "has_genre", GENRES[i % 8 % 4]) for i in range(first, last)]


def png(color: tuple[int, int, int] = (200, 10, 10), size: int = 40) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (size, size), color).save(out, format="PNG")
    return out.getvalue()


def image_fact(image: dict[str, Any] | None, obj: str = "Paris", **evidence: Any) -> dict[str, Any]:
    """A photo-sourced claim about the Eiffel Tower, with ``image`` (and any other evidence)."""
    ev: dict[str, Any] = dict(evidence)
    if image is not None:
        ev["image"] = image
    return {"subject": "Eiffel Tower", "predicate": "located_in", "object": obj, "source": "photos", "evidence": ev}
