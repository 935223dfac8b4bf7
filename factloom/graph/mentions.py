"""Entity mentions in question text: ``[bracketed]`` names, and the question without them.

Plain string work, apart from entity linking (``graph.linking``, which needs Neo4j), so that the
model layer can read a question's relation words without loading the driver.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["bracketed_mentions", "strip_mentions"]

_BRACKETED = re.compile(r"\[([^\[\]]+)\]")


def bracketed_mentions(question: str) -> list[str]:
    """The names written in ``[brackets]``, in order of appearance."""
    return [m.strip() for m in _BRACKETED.findall(question) if m.strip()]


def strip_mentions(question: str, names: Sequence[str] = ()) -> str:
    """The question without its entity mentions, so that only the relation words remain.

    Bracketed mentions always go; each of ``names`` (the linked seeds) goes too, case-insensitively,
    for questions that named an entity without brackets.
    """
    text = _BRACKETED.sub(" ", question)
    for name in sorted({n for n in names if n.strip()}, key=len, reverse=True):
        text = re.sub(r"(?<!\w)" + re.escape(name.strip()) + r"(?!\w)", " ", text, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", text).strip()
