"""Entity linking: which entities of a knowledge base a question is about.

The cheapest reliable evidence wins, in order: names the asker put in ``[brackets]`` (the MetaQA
convention, and what the API documents), then the longest word n-gram of the question that is an
entity name or alias, then the full-text index on names, then the nearest entity embeddings.
"""

from __future__ import annotations

import re

from factloom.graph import queries as q
from factloom.graph.mentions import bracketed_mentions, strip_mentions
from factloom.graph.store import Neo4jStore, check_kb
from factloom.graph.types import Seed, entity_key

__all__ = ["link_entities", "strip_mentions", "bracketed_mentions", "lucene_escape"]

# every character the classic Lucene query parser gives a meaning to
_LUCENE_SPECIAL = re.compile(r'([+\-!(){}\[\]^"~*?:\\/&|])')
_LUCENE_OPERATORS = re.compile(r"\b(AND|OR|NOT|TO)\b")
_EDGE_PUNCT = "?!.,;:\"'()“”‘’"
# n-grams made only of these never link: "the", "who", "film" are entity names in some graphs
_STOPWORDS = frozenset(
    [
        "a", "an", "the", "of", "in", "on", "at", "by", "to", "for", "from", "with", "and",
        "or", "is", "are", "was", "were", "be", "been", "do", "does", "did", "what", "which",
        "who", "whom", "whose", "when", "where", "why", "how", "that", "this", "these", "those",
        "it", "its", "their", "there", "as", "also", "same", "share", "shared", "film", "films",
        "movie", "movies", "written", "directed", "starred", "acted"
    ]
)
_MAX_NGRAM = 12
_FULLTEXT_OVERFETCH = 20
_VECTOR_OVERFETCH = 20
# a full-text hit well below the best one is noise (a shared "the"), not a second seed
_FULLTEXT_RELATIVE_FLOOR = 0.5


def lucene_escape(text: str) -> str:
    """Make free text safe for ``db.index.fulltext.queryNodes``: no operators, no syntax."""
    text = _LUCENE_OPERATORS.sub(lambda m: m.group(1).lower(), text)
    return _LUCENE_SPECIAL.sub(r"\\\1", text)


def link_entities(
    store: Neo4jStore, *, kb: str, question: str, vector: list[float] | None, limit: int = 3,
) -> list[Seed]:
    """Seed entities for ``question`` in ``kb``, best first, at most ``limit``.

    ``vector`` is the question's embedding (the caller usually has it already); ``None`` skips the
    vector step. An empty list means nothing linked, which callers report rather than raise.
    """
    check_kb(kb)
    if limit < 1:
        return []
    mentions = bracketed_mentions(question)
    if mentions:
        # the asker told us the entities; a bracketed name that does not exist links to nothing
        # rather than to a guess, so the answer can say so
        return _exact(store, kb, [entity_key(m) for m in mentions], limit)
    seeds = _longest_ngrams(store, kb, question, limit)
    if seeds:
        return seeds
    seeds = _fulltext(store, kb, question, limit)
    if seeds:
        return seeds
    if vector is not None:
        return _vector(store, kb, vector, limit)
    return []


def _exact(store: Neo4jStore, kb: str, keys: list[str], limit: int, score: float = 1.0) -> list[Seed]:
    keys = list(dict.fromkeys(k for k in keys if k))
    if not keys:
        return []
    rows = store.run(q.LINK_EXACT, routing="r", kb=kb, keys=keys)
    by_key = {r["key"]: r for r in rows}
    seeds: dict[str, Seed] = {}
    for key in keys:  # keep the question's order
        row = by_key.get(key)
        if row and row["id"] not in seeds:
            seeds[row["id"]] = Seed(entity_id=row["id"], name=row["name"], score=score, how="exact")
    return list(seeds.values())[:limit]


def _ngrams(question: str) -> list[tuple[int, int, str]]:
    """(start, end, key) of every word n-gram, edge punctuation trimmed, stopword-only ones dropped."""
    words = question.split()
    out: list[tuple[int, int, str]] = []
    for i in range(len(words)):
        for j in range(i + 1, min(len(words), i + _MAX_NGRAM) + 1):
            phrase = " ".join(words[i:j]).strip(_EDGE_PUNCT)
            key = entity_key(phrase)
            if key and not all(w.strip(_EDGE_PUNCT).casefold() in _STOPWORDS for w in words[i:j]):
                out.append((i, j, key))
    return out


def _longest_ngrams(store: Neo4jStore, kb: str, question: str, limit: int) -> list[Seed]:
    grams = _ngrams(question)
    if not grams:
        return []
    rows = store.run(q.LINK_EXACT, routing="r", kb=kb, keys=sorted({k for _, _, k in grams}))
    found = {r["key"]: r for r in rows}
    hits = sorted(
        ((i, j, found[k]) for i, j, k in grams if k in found), key=lambda h: (h[0] - h[1], h[0]),
    )
    if not hits:
        return []
    # only the longest match and matches as long as it: a stray one-word title ("Up", "Her")
    # inside a question about a longer name is far more often noise than a second topic
    longest = hits[0][1] - hits[0][0]
    taken: list[tuple[int, int]] = []
    seeds: dict[str, Seed] = {}
    for i, j, row in hits:
        if j - i < longest or len(seeds) >= limit:
            break
        if any(i < b and a < j for a, b in taken) or row["id"] in seeds:
            continue
        taken.append((i, j))
        seeds[row["id"]] = Seed(entity_id=row["id"], name=row["name"], score=0.9, how="exact")
    return list(seeds.values())


def _fulltext(store: Neo4jStore, kb: str, question: str, limit: int) -> list[Seed]:
    words = [w for w in question.split() if w.strip(_EDGE_PUNCT).casefold() not in _STOPWORDS]
    text = lucene_escape(" ".join(words)).strip()
    if not text:
        return []
    rows = store.run(
        q.LINK_FULLTEXT, routing="r", kb=kb, text=text,
        fetch=limit * _FULLTEXT_OVERFETCH, limit=limit,
    )
    if not rows:
        return []
    best = float(rows[0]["score"])
    return [
        # Lucene scores are unbounded; relative to the best hit they say how much weaker a rival is
        Seed(entity_id=r["id"], name=r["name"], score=round(float(r["score"]) / best, 4), how="fulltext")
        for r in rows
        if best > 0 and float(r["score"]) >= _FULLTEXT_RELATIVE_FLOOR * best
    ]


def _vector(store: Neo4jStore, kb: str, vector: list[float], limit: int) -> list[Seed]:
    rows = store.run(
        q.LINK_VECTOR, routing="r", kb=kb, vector=[float(x) for x in vector],
        fetch=max(limit * _VECTOR_OVERFETCH, 50), limit=limit,
    )
    return [Seed(entity_id=r["id"], name=r["name"], score=float(r["score"]), how="vector") for r in rows]
