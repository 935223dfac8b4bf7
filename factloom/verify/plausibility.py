"""Plausibility: how well a claim fits the graph's learned structure, from a KG-embedding scorer.

One batched scorer pass per call scores every claim the scorer can judge. The probability is the
scorer's per-relation calibrated probability; ``details`` carry the numbers a learned fusion can use
beside it (raw score, filtered ranks of the tail and the head, entity and relation-pair frequencies,
see :data:`factloom.model.scorer.FEATURE_NAMES`) and, given entity types, the type support of each side:
the largest share of the scorer's training facts of the predicate whose object (subject) shares a type
with the claim's object (subject), -1 for an entity without types. A claim naming an entity or a relation the scorer
never saw gets an abstention with the reason, never an exception.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from factloom.model.scorer import FEATURE_NAMES, ComplExScorer
from factloom.verify.base import Claim, GraphView, VerifierResult

__all__ = ["PlausibilityVerifier", "TYPE_FEATURES"]

TYPE_FEATURES = ("tail_type_support", "head_type_support")


class PlausibilityVerifier:
    """Args:
        scorer: a trained (and preferably calibrated) :class:`ComplExScorer`.
        name: the verifier's name in results and in the fusion's features; two scorers (an ensemble)
            run as two verifiers with different names.
        version: stored with each result; defaults to the scorer's own version string.
        entity_types: entity name -> type ids; adds :data:`TYPE_FEATURES` to each result's details.
    """

    def __init__(self, scorer: ComplExScorer, *, name: str = "plausibility", version: str | None = None,
                 entity_types: Mapping[str, Sequence[str]] | None = None) -> None:
        self.scorer = scorer
        self.name = name
        self.version = version or scorer.version
        self.entity_types = entity_types
        self._support: dict[str, tuple[Counter[str], Counter[str], int]] = {}
        if entity_types is not None:
            ents, rels = list(scorer.entities), list(scorer.relations)
            for h, r, t in scorer.known.tolist():
                tails, heads, n = self._support.get(rels[r], (Counter(), Counter(), 0))
                tails.update(entity_types.get(ents[t], ()))
                heads.update(entity_types.get(ents[h], ()))
                self._support[rels[r]] = (tails, heads, n + 1)

    @property
    def feature_names(self) -> list[str]:
        """The numeric ``details`` keys each (non-abstaining) result carries."""
        return [*FEATURE_NAMES, *(TYPE_FEATURES if self.entity_types is not None else ())]

    def _type_support(self, entity: str, predicate: str, side: int) -> float:
        assert self.entity_types is not None
        types = self.entity_types.get(entity, ())
        counts = self._support.get(predicate)
        if not types or counts is None:
            return -1.0
        seen = counts[0] if side == 0 else counts[1]
        return max(seen[t] for t in types) / max(counts[2], 1)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, version={self.version!r})"

    @classmethod
    def load(cls, path: Path, *, name: str = "plausibility", version: str | None = None) -> PlausibilityVerifier:
        return cls(ComplExScorer.load(path), name=name, version=version)

    def check(self, claims: Sequence[Claim], graph: GraphView, now: datetime) -> list[VerifierResult]:
        triples = [(c.subject, c.predicate, c.object) for c in claims]
        feats = self.scorer.features(triples) if triples else []
        out: list[VerifierResult] = []
        for triple, f in zip(triples, feats, strict=True):
            if f is None:
                why = self.scorer.unseen(triple) or "unseen by the scorer"
                out.append(VerifierResult(self.name, None, why, model_version=self.version))
                continue
            p = min(max(f["probability"], 0.0), 1.0)
            tail_rank, head_rank = round(math.exp(f["log_tail_rank"])), round(math.exp(f["log_head_rank"]))
            verb = "plausible" if p >= 0.5 else "implausible"
            reason = (f"{verb} by graph embedding (p {p:.2f}): object ranks {tail_rank} of "
                      f"{len(self.scorer.entities)} for '{triple[1]}', subject ranks {head_rank}")
            details = dict(f)
            if self.entity_types is not None:
                details["tail_type_support"] = self._type_support(triple[2], triple[1], 0)
                details["head_type_support"] = self._type_support(triple[0], triple[1], 1)
            out.append(VerifierResult(self.name, p, reason, score=f["raw"], details=details,
                                      model_version=self.version))
        return out
